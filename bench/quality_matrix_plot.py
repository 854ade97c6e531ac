"""docs/figures/quality_matrix.png from bench/results/quality_matrix.json.

One column per (dataset, partition); top row TER − retrain, bottom row BA-ASR − retrain
(points, mean ± std over seeds, symmetric-log scale below so a method that keeps the
backdoor, +90 points, stays readable beside ±1-point gaps); the dashed line is the Starfish
goal (+1 point).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

GAPS = (("ter_gap", "TER − retrain (points)"), ("ba_asr_gap", "BA-ASR − retrain (points)"))


def plot(result: dict[str, Any] | None, path: Path) -> None:
    """Draw the figure of `result` (the JSON of bench.quality_matrix) to `path`."""
    if not result:
        raise SystemExit("no bench/results/quality_matrix.json; run `python -m bench.quality_matrix` first")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = result["figures"]["summary"]
    cases = sorted(summary)
    methods = [m for m in next(iter(summary.values())) if m not in ("before", "retrain")]
    fig, axes = plt.subplots(2, len(cases), figsize=(3.6 * len(cases), 6.4), squeeze=False, sharey="row")
    for col, case in enumerate(cases):
        for row, (key, label) in enumerate(GAPS):
            ax = axes[row][col]
            rows = [summary[case].get(m) for m in methods]
            means = [r[key]["mean"] if r else 0.0 for r in rows]
            stds = [r[key]["std"] if r else 0.0 for r in rows]
            colors = ["tab:green" if r and r.get("goal_met") else "tab:gray" for r in rows]
            ax.bar(range(len(methods)), means, yerr=stds, color=colors, capsize=3)
            ax.axhline(1.0, color="tab:red", linestyle="--", linewidth=1)
            ax.axhline(0.0, color="black", linewidth=0.6)
            if row == 1:
                ax.set_yscale("symlog", linthresh=2.0)
            ax.set_xticks(range(len(methods)), methods, rotation=60, ha="right", fontsize=8)
            if col == 0:
                ax.set_ylabel(label)
            if row == 0:
                ax.set_title(case, fontsize=10)
    fig.suptitle("Gap to retraining, mean ± std over seeds (green: TER and BA-ASR ≤ +1 point, ARP ≥ 70 %)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
