"""Inline SVG charts for the job report page: no library, no external asset.

Each chart is an `<svg data-chart="NAME">` with an explicit size and viewBox, every
label escaped, and a `<title>` per mark so a reader hovering a bar sees its value.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

WIDTH = 640
ROW = 22  #: height of one bar or grid row
LABEL_W = 210  #: room for the labels left of the bars
PALETTE = ("#2f6db5", "#e08a2c", "#3f9b5a", "#b54a4a", "#7a5bb5")


@dataclass(frozen=True)
class Series:
    name: str
    values: Sequence[float]
    color: str


def _svg(name: str, width: int, height: int, label: str, body: list[str]) -> str:
    return (
        f'<svg data-chart="{escape(name)}" role="img" aria-label="{escape(label)}" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}">' + "".join(body) + "</svg>"
    )


def _text(x: float, y: float, text: str, anchor: str = "start", cls: str = "lbl") -> str:
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" class="{cls}">{escape(text)}</text>'


def hbar_chart(
    name: str, labels: Sequence[str], series: Sequence[Series], fmt: Callable[[float], str], stacked: bool = True
) -> str:
    """Horizontal bars, one row per label; several series are stacked (or drawn side by side)."""
    rows = len(labels)
    per_row = 1 if stacked else len(series)
    legend_h = ROW if len(series) > 1 else 0
    height = legend_h + rows * per_row * ROW + 8
    totals = [sum(s.values[i] for s in series) if stacked else max(s.values[i] for s in series) for i in range(rows)]
    top = max([*totals, 1e-12])
    span = WIDTH - LABEL_W - 90
    body = _legend(series) if len(series) > 1 else []
    for i, label in enumerate(labels):
        y0 = legend_h + i * per_row * ROW
        body.append(_text(LABEL_W - 6, y0 + per_row * ROW / 2 + 5, label, "end"))
        offset = 0.0
        for k, s in enumerate(series):
            w = span * s.values[i] / top
            x = LABEL_W + (offset if stacked else 0)
            y = y0 + (0 if stacked else k * ROW) + 3
            body.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 0.5):.1f}" height="{ROW - 6}" fill="{s.color}">'
                f"<title>{escape(f'{label} — {s.name}: {fmt(s.values[i])}')}</title></rect>"
            )
            if not stacked:  # each bar carries its own value
                body.append(_text(x + max(w, 0.5) + 6, y + ROW / 2 + 2, fmt(s.values[i])))
            offset += w if stacked else 0
        if stacked:
            body.append(_text(LABEL_W + span * totals[i] / top + 6, y0 + ROW / 2 + 5, fmt(totals[i])))
    return _svg(name, WIDTH, height, f"{name}: {', '.join(labels)}", body)


def _legend(series: Sequence[Series]) -> list[str]:
    body, x = [], float(LABEL_W)
    for s in series:
        body.append(f'<rect x="{x:.1f}" y="4" width="12" height="12" fill="{s.color}"/>')
        body.append(_text(x + 16, 14, s.name))
        x += 16 + 7.2 * len(s.name) + 18
    return body


def round_strip(name: str, total: int, selected: Sequence[int], marked: Sequence[int] = ()) -> str:
    """Rounds 1..T as cells: selected rounds filled, `marked` rounds (e.g. check rounds) outlined."""
    cell = max(12, min(36, (WIDTH - 20) // max(total, 1)))
    width = max(WIDTH, 20 + cell * total)
    chosen, checks = set(selected), set(marked)
    body = []
    for i in range(1, total + 1):
        x = 10 + (i - 1) * cell
        fill = PALETTE[0] if i in chosen else "#e4e8ee"
        stroke = ' stroke="#b54a4a" stroke-width="2"' if i in checks else ""
        state = "selected" if i in chosen else "not selected"
        body.append(
            f'<rect x="{x}" y="6" width="{cell - 3}" height="{cell - 3}" fill="{fill}"{stroke}>'
            f"<title>round {i}: {state}{', threshold check' if i in checks else ''}</title></rect>"
        )
        if total <= 60 or i % 5 == 0:
            body.append(_text(x + (cell - 3) / 2, cell + 18, str(i), "middle", "tick"))
    return _svg(name, width, cell + 26, f"rounds 1 to {total}, {len(chosen)} selected", body)


def flag_grid(name: str, rows: Sequence[str], cols: Sequence[str], cells: Sequence[Sequence[bool | None]]) -> str:
    """A grid of booleans (rows × columns): True filled, False empty, None absent."""
    cw = max(14, min(40, (WIDTH - LABEL_W) // max(len(cols), 1)))
    head = 70
    width = LABEL_W + cw * len(cols) + 10
    body = []
    for j, col in enumerate(cols):
        x = LABEL_W + j * cw + cw / 2
        body.append(f'<text transform="translate({x:.1f},{head - 6}) rotate(-55)" class="tick">{escape(col)}</text>')
    for i, row in enumerate(rows):
        y = head + i * ROW
        body.append(_text(LABEL_W - 6, y + ROW / 2 + 4, row, "end"))
        for j, value in enumerate(cells[i]):
            if value is None:
                continue
            fill = PALETTE[3] if value else "#ffffff"
            tip = escape(f"{row}, {cols[j]}: " + ("flagged" if value else "not flagged"))
            body.append(
                f'<rect x="{LABEL_W + j * cw + 1}" y="{y + 2}" width="{cw - 3}" height="{ROW - 4}" fill="{fill}" '
                f'stroke="#8893a0"><title>{tip}</title></rect>'
            )
    return _svg(name, max(width, 200), head + len(rows) * ROW + 6, f"{name}: {len(rows)} × {len(cols)}", body)
