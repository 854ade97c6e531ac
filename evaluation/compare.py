"""Comparison table (markdown) and figure (PNG) of several strategies on one history,
laid out like Figure 3 of the Starfish paper: one panel per metric (TER, BA-ASR,
MIA-ASR, ARP), one bar per method, with the model before unlearning for reference.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: (key in a run's "metrics" or top level, column title) in display order, all in percent
PANELS = (("ter", "TER"), ("ba_asr", "BA-ASR"), ("mia_asr", "MIA-ASR"), ("arp_percent", "ARP"))


def _percent(run: Mapping[str, Any], key: str) -> float | None:
    if key == "arp_percent":
        return run.get("arp_percent")
    value = run.get("metrics", {}).get(key)
    return None if value is None else 100.0 * value


def _fmt(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def markdown_table(runs: Sequence[Mapping[str, Any]], before: Mapping[str, Any] | None = None) -> str:
    """One row per strategy: TER, BA-ASR, MIA-ASR, ARP (percent), time and retrain gap."""
    head = "| method | TER % | BA-ASR % | MIA-ASR % | ARP % | time s | ‖M̂−M_retrain‖ (rel.) |"
    lines = [head, "|" + " --- |" * 7]
    if before is not None:
        lines.append(
            f"| before unlearning | {_fmt(100 * before['ter'])} | {_fmt(100 * before['ba_asr'])} | "
            f"{_fmt(100 * before['mia_asr'])} | — | — | — |"
        )
    for run in runs:
        if run.get("metrics", {}).get("diverged"):
            lines.append(f"| {run['strategy']} | diverged (non-finite model) | | | | {_fmt(run['seconds'])} | — |")
            continue
        gap = run.get("gap_to_retrain")
        gap_text = "—" if gap is None else f"{gap['l2']:.3g} ({gap['relative']:.3f})"
        cells = [_fmt(_percent(run, key)) for key, _ in PANELS]
        lines.append(f"| {run['strategy']} | " + " | ".join(cells) + f" | {_fmt(run['seconds'])} | {gap_text} |")
    return "\n".join(lines) + "\n"


def plot(runs: Sequence[Mapping[str, Any]], path: str | Path, title: str) -> None:
    """Write the four-panel bar chart to `path` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["strategy"] for r in runs]
    fig, axes = plt.subplots(1, len(PANELS), figsize=(3.2 * len(PANELS), 3.4))
    for ax, (key, label) in zip(axes, PANELS, strict=True):
        values = [_percent(r, key) for r in runs]
        heights = [0.0 if v is None else v for v in values]
        bars = ax.bar(range(len(names)), heights, color=[f"C{i}" for i in range(len(names))])
        for bar, v in zip(bars, values, strict=True):
            ax.annotate(
                _fmt(v), (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom", fontsize=7
            )
        ax.set_xticks(range(len(names)), names, rotation=45, ha="right", fontsize=8)
        ax.set_title(f"{label} (%)")
        ax.set_ylim(0, max(100.0 if key == "arp_percent" else 0.0, max(heights, default=0.0) * 1.2 + 1.0))
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(Path(path), dpi=120)
    plt.close(fig)
