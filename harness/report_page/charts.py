"""Inline SVG charts for the job report page: no library, no external asset.

Each chart is an `<svg data-chart="NAME">` with an explicit size and viewBox, every
label escaped, and a `<title>` per mark so a reader hovering a bar sees its value.

Nothing is clipped: the room for each label (left of the bars, the values right of them,
the legend, the rotated column heads of a grid) is sized from `text_width`, an upper
estimate of the label's rendered width, and the chart grows (legend rows wrap, the
viewBox widens) rather than cut a label at its edge.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

WIDTH = 640  #: the charts' usual width; a chart with longer labels is wider
ROW = 22  #: height of one bar or grid row
MARGIN = 10  #: empty room at the edges of a chart
BAR_SPAN = 300  #: the least room for the bars themselves
LABEL_SIZE = 12  #: font size of `lbl` text (the page's style), px
TICK_SIZE = 10  #: font size of `tick` text, px
HEAD_ANGLE = math.radians(55)  #: rotation of a grid's column heads
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


def text_width(text: str, size: float = LABEL_SIZE) -> float:
    """Upper estimate of `text`'s rendered width in px at font `size` (em widths of a wide
    sans-serif such as DejaVu Sans: narrow glyphs 0.35, lower case 0.64, capitals and digits
    0.72, m/w/M/W/@/% and anything outside ASCII 1.0)."""
    em = 0.0
    for ch in text:
        if ch in "ijlft.,:;!|'()[] ":
            em += 0.35
        elif ch in "mwMW@%" or not ch.isascii():
            em += 1.0
        elif ch.isupper() or ch.isdigit():
            em += 0.72
        else:
            em += 0.64
    return em * size


def _legend(series: Sequence[Series], width: float) -> tuple[list[str], float]:
    """Legend entries (swatch + name) left to right, wrapping onto a new row before the
    right edge; returns the marks and the legend's height."""
    body: list[str] = []
    x, y = float(MARGIN), 0.0
    for s in series:
        entry = 16 + text_width(s.name) + 18
        if x > MARGIN and x + entry > width - MARGIN:
            x, y = float(MARGIN), y + ROW
        body.append(f'<rect x="{x:.1f}" y="{y + 4:.1f}" width="12" height="12" fill="{s.color}"/>')
        body.append(_text(x + 16, y + 14, s.name, cls="lbl legend"))
        x += entry
    return body, y + ROW


def hbar_chart(
    name: str, labels: Sequence[str], series: Sequence[Series], fmt: Callable[[float], str], stacked: bool = True
) -> str:
    """Horizontal bars, one row per label; several series are stacked (or drawn side by side)."""
    rows = len(labels)
    per_row = 1 if stacked else len(series)
    totals = [sum(s.values[i] for s in series) if stacked else max(s.values[i] for s in series) for i in range(rows)]
    shown = totals if stacked else [v for s in series for v in s.values]
    label_w = MARGIN + max([text_width(label) for label in labels] or [0.0]) + 8
    value_w = 6 + max([text_width(fmt(v)) for v in shown] or [0.0]) + MARGIN
    legend_w = 2 * MARGIN + max(34 + text_width(s.name) for s in series) if len(series) > 1 else 0.0
    width = math.ceil(max(WIDTH, label_w + BAR_SPAN + value_w, legend_w))
    span = width - label_w - value_w
    body, legend_h = _legend(series, width) if len(series) > 1 else ([], 0.0)
    top = max([*totals, 1e-12])
    for i, label in enumerate(labels):
        y0 = legend_h + i * per_row * ROW
        body.append(_text(label_w - 8, y0 + per_row * ROW / 2 + 5, label, "end"))
        offset = 0.0
        for k, s in enumerate(series):
            w = span * s.values[i] / top
            x = label_w + (offset if stacked else 0)
            y = y0 + (0 if stacked else k * ROW) + 3
            body.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 0.5):.1f}" height="{ROW - 6}" fill="{s.color}">'
                f"<title>{escape(f'{label} — {s.name}: {fmt(s.values[i])}')}</title></rect>"
            )
            if not stacked:  # each bar carries its own value
                body.append(_text(x + max(w, 0.5) + 6, y + ROW / 2 + 2, fmt(s.values[i])))
            offset += w if stacked else 0
        if stacked:
            body.append(_text(label_w + span * totals[i] / top + 6, y0 + ROW / 2 + 5, fmt(totals[i])))
    height = math.ceil(legend_h + rows * per_row * ROW + 8)
    return _svg(name, width, height, f"{name}: {', '.join(labels)}", body)


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
    """A grid of booleans (rows × columns): True filled, False empty, None absent. Column
    heads are rotated; the room above and right of the grid is sized from their widths."""
    label_w = MARGIN + max([text_width(r) for r in rows] or [0.0]) + 8
    cw = max(14, min(40, int((WIDTH - label_w) // max(len(cols), 1))))
    heads = [text_width(c, TICK_SIZE) for c in cols]
    head = math.ceil(max([h * math.sin(HEAD_ANGLE) for h in heads] or [0.0]) + TICK_SIZE + 8)
    reach = max([j * cw + cw / 2 + h * math.cos(HEAD_ANGLE) + TICK_SIZE for j, h in enumerate(heads)] or [0.0])
    width = math.ceil(max(200, label_w + max(cw * len(cols), reach) + MARGIN))
    body = []
    for j, col in enumerate(cols):
        x = label_w + j * cw + cw / 2
        body.append(f'<text transform="translate({x:.1f},{head - 6}) rotate(-55)" class="tick">{escape(col)}</text>')
    for i, row in enumerate(rows):
        y = head + i * ROW
        body.append(_text(label_w - 8, y + ROW / 2 + 4, row, "end"))
        for j, value in enumerate(cells[i]):
            if value is None:
                continue
            fill = PALETTE[3] if value else "#ffffff"
            tip = escape(f"{row}, {cols[j]}: " + ("flagged" if value else "not flagged"))
            body.append(
                f'<rect x="{label_w + j * cw + 1:.1f}" y="{y + 2}" width="{cw - 3}" height="{ROW - 4}" '
                f'fill="{fill}" stroke="#8893a0"><title>{tip}</title></rect>'
            )
    return _svg(name, width, head + len(rows) * ROW + 6, f"{name}: {len(rows)} × {len(cols)}", body)
