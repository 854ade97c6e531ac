"""The demo's outputs: the console tables, the JSON report and the PNG plots.

Three models are compared on TER, BA-ASR and MIA-ASR (percent; `evaluation.unlearning_metrics`):
the global model before unlearning (M_T), the Starfish-2PC model M̂ and the retrain
reference. Costs are listed per step: wall time, and bytes on the wire (client uploads and
party-to-party traffic in Stage I; online party-to-party and offline dealer bytes per
protocol step of the unlearning job, from the job's cost ledger).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.report_page.sections import STEPS

#: (key in a metrics dict, column title)
METRICS = (("ter", "TER %"), ("ba_asr", "BA-ASR %"), ("mia_asr", "MIA-ASR %"))
#: the three rows of the comparison, in display order: (key, label)
ROWS = (("before", "before unlearning (M_T)"), ("starfish", "after Starfish-2PC"), ("retrain", "retrain (plaintext)"))
#: protocol steps of the Starfish job in the order they run, with their names (the report page's)
STEP_NAMES = STEPS
STEP_ORDER = tuple(STEPS)


def mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB"


def table(head: Sequence[str], rows: Sequence[Sequence[str]], numeric: bool = True) -> list[str]:
    """Plain-text table; with `numeric` every column but the first is right-aligned."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]

    def fmt(cells: Sequence[str]) -> str:
        return "  ".join(
            c.rjust(w) if numeric and i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    return [fmt(head), "  ".join("-" * w for w in widths), *(fmt(r) for r in rows)]


def metrics_table(metrics: Mapping[str, Mapping[str, float]], gaps: Mapping[str, Mapping[str, float]]) -> list[str]:
    """TER / BA-ASR / MIA-ASR of the three models and their distance to the retrain model."""
    rows = []
    for key, label in ROWS:
        m = metrics[key]
        gap = gaps.get(key)
        rows.append(
            [label, *(f"{100 * m[k]:.1f}" for k, _ in METRICS), "—" if gap is None else f"{gap['relative']:.3f}"]
        )
    return table(["model", *(t for _, t in METRICS), "‖M − M_retrain‖ rel."], rows)


def cost_table(steps: Sequence[Mapping[str, Any]]) -> list[str]:
    """One row per step: seconds and bytes (`steps` as built by `harness.demo.demo_run`)."""
    rows = [[s["step"], f"{s['seconds']:.1f}", s.get("bytes_text", "—")] for s in steps]
    return table(["step", "time s", "bytes"], rows)


def job_steps(costs: Mapping[str, Mapping[str, float]]) -> list[dict[str, Any]]:
    """Per-step costs of the unlearning job (party0's ledger), in protocol order."""
    names = [n for n in STEP_ORDER if n in costs] + sorted(n for n in costs if n not in STEP_ORDER)
    out = []
    for n in names:
        c = costs[n]
        out.append(
            {
                "step": f"  {STEP_NAMES.get(n, n)}",
                "key": n,
                "seconds": float(c.get("seconds", 0.0)),
                "online_bytes": int(c.get("online_bytes", 0)),
                "offline_bytes": int(c.get("offline_bytes", 0)),
                "bytes_text": f"{mb(c.get('online_bytes', 0))} online + {mb(c.get('offline_bytes', 0))} offline",
            }
        )
    return out


def write_json(path: Path, report: Mapping[str, Any]) -> None:
    path.write_text(json.dumps(report, indent=1, sort_keys=False) + "\n")


def plot_metrics(path: Path, metrics: Mapping[str, Mapping[str, float]], title: str) -> None:
    """Grouped bars: one group per metric, one bar per model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    width = 0.8 / len(ROWS)
    for r, (key, label) in enumerate(ROWS):
        values = [100 * metrics[key][k] for k, _ in METRICS]
        xs = [i + (r - (len(ROWS) - 1) / 2) * width for i in range(len(METRICS))]
        bars = ax.bar(xs, values, width, label=label, color=f"C{r}")
        for bar, v in zip(bars, values, strict=True):
            ax.annotate(
                f"{v:.1f}", (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom", fontsize=7
            )
    ax.set_xticks(range(len(METRICS)), [t for _, t in METRICS])
    ax.set_ylim(0, 125)  # headroom for the legend above the bars
    ax.set_ylabel("percent")
    ax.legend(fontsize=8, loc="upper center", ncol=len(ROWS))
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_costs(path: Path, steps: Sequence[Mapping[str, Any]], title: str) -> None:
    """Two panels: seconds per step, and MB per step (online / offline) of the unlearning job."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [s["key"] for s in steps]
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.4))
    a.bar(names, [s["seconds"] for s in steps], color="C0")
    a.set_title("wall time per step (s)", fontsize=9)
    online = [s["online_bytes"] / 1e6 for s in steps]
    offline = [s["offline_bytes"] / 1e6 for s in steps]
    b.bar(names, online, label="online (party↔party)", color="C1")
    b.bar(names, offline, bottom=online, label="offline (dealer→parties)", color="C2")
    b.set_title("bytes per step (MB)", fontsize=9)
    b.legend(fontsize=7)
    for ax in (a, b):
        ax.tick_params(axis="x", labelsize=8, rotation=30)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
