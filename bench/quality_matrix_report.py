"""docs/QUALITY.md's tables and docs/figures/quality_matrix.png from the JSON results.

`table` renders bench/results/quality_matrix.json as mean ± std per (dataset, partition,
method) with the Starfish goal met or not; `secrs_table` renders
bench/results/secrs_random.json. Figure: one column per (dataset, partition); top row
TER − retrain, bottom row BA-ASR − retrain (points, mean ± std over seeds, symmetric-log
scale below so a method that keeps the backdoor, +90 points, stays readable beside
±1-point gaps); the dashed line is the Starfish goal (+1 point).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

GAPS = (("ter_gap", "TER − retrain (points)"), ("ba_asr_gap", "BA-ASR − retrain (points)"))


def plot(result: dict[str, Any] | None, path: Path, order: Sequence[str]) -> None:
    """Draw the figure of `result` (the JSON of bench.quality_matrix) to `path`, methods in `order`."""
    if not result:
        raise SystemExit("no bench/results/quality_matrix.json; run `python -m bench.quality_matrix` first")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = result["figures"]["summary"]
    cases = [c for c in sorted(summary) if c.count("/") == 1]  # the four matrix cases (the CNN, other T: tables)
    methods = [m for m in order if any(m in rows for rows in summary.values())]
    fig, axes = plt.subplots(2, len(cases), figsize=(3.6 * len(cases), 6.4), squeeze=False, sharey="row")
    for col, case in enumerate(cases):
        for row, (key, label) in enumerate(GAPS):
            ax = axes[row][col]
            rows = [summary[case].get(m) for m in methods]
            means = [r[key]["mean"] if r else float("nan") for r in rows]  # nan: no bar (not measured)
            stds = [r[key]["std"] if r else 0.0 for r in rows]
            colors = ["tab:green" if r and r.get("goal_met") else "tab:gray" for r in rows]
            ax.bar(range(len(methods)), means, yerr=stds, color=colors, capsize=3)
            ax.axhline(1.0, color="tab:red", linestyle="--", linewidth=1)
            ax.axhline(0.0, color="black", linewidth=0.6)
            if row == 1:
                ax.set_yscale("symlog", linthresh=2.0)
                ax.set_ylim(bottom=-2.0)  # a gap below retraining of more than 2 points does not occur
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


def _pm(stats: dict[str, float], signed: bool = False) -> str:
    return f"{stats['mean']:+.2f} ± {stats['std']:.2f}" if signed else f"{stats['mean']:.2f} ± {stats['std']:.2f}"


def table(result: dict[str, Any]) -> str:
    """Markdown rows: case, method, seeds, TER, TER − retrain, BA-ASR, BA-ASR − retrain, MIA-ASR, ARP, goal."""
    lines = [
        "| case | method | seeds | TER % | TER − retrain | BA-ASR % | BA-ASR − retrain | MIA-ASR % | ARP % | goal |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for case, methods in sorted(result["figures"]["summary"].items()):
        for method, s in methods.items():
            goal = "—" if method in ("before", "retrain") else ("met" if s["goal_met"] else "not met")
            lines.append(
                f"| {case} | {method} | {s['seeds']} | {_pm(s['ter'])} | {_pm(s['ter_gap'], True)} | "
                f"{_pm(s['ba_asr'])} | {_pm(s['ba_asr_gap'], True)} | {_pm(s['mia_asr'])} | "
                f"{s['arp']['mean']:.1f} | {goal} |"
            )
    return "\n".join(lines)


def secrs_table(result: dict[str, Any]) -> str:
    """Markdown rows of the paired SecRS − random differences (points) per (dataset/partition, setting)."""
    lines = [
        "| case | setting | histories × draws | TER SecRS | TER random | TER diff | better / worse "
        "| BA-ASR SecRS | BA-ASR random | BA-ASR diff | better / worse |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for case, settings in result["figures"]["summary"].items():
        for name, s in settings.items():
            ter, ba = s["ter"], s["ba_asr"]
            lines.append(
                f"| {case} | {name} | {s['histories']} × {s['draws']} | {_pm(ter['secrs'])} | "
                f"{_pm(ter['random'])} | {_pm(ter['diff'], True)} | {ter['secrs_better']} / {ter['secrs_worse']} | "
                f"{_pm(ba['secrs'])} | {_pm(ba['random'])} | {_pm(ba['diff'], True)} | "
                f"{ba['secrs_better']} / {ba['secrs_worse']} |"
            )
    return "\n".join(lines)


#: the rows of the defaults table: the shipped defaults, the paper's, the earlier demo setting
DEFAULTS_ROWS = ("starfish-defaults", "starfish-paper", "starfish")


def defaults_table(result: dict[str, Any]) -> str:
    """Markdown rows: the Starfish goal per case (every case of the JSON, the CNN and other T
    included) for the shipped defaults, the paper's setting and the earlier demo setting, and
    each method's 2PC row beside its plaintext row (model distance to the plaintext run)."""
    lines = [
        "| case | setting | seeds | TER − retrain | BA-ASR − retrain | ARP % | goal | 2PC: model distance |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for case, methods in sorted(result["figures"]["summary"].items()):
        names = [m for m in methods if m in DEFAULTS_ROWS or m.endswith("-2pc")]
        for method in names:
            s = methods[method]
            gap = _model_gaps(result, case, method)
            lines.append(
                f"| {case} | {method} | {s['seeds']} | {_pm(s['ter_gap'], True)} | {_pm(s['ba_asr_gap'], True)} | "
                f"{s['arp']['mean']:.1f} | {'met' if s['goal_met'] else 'not met'} | {gap} |"
            )
    return "\n".join(lines)


def _model_gaps(result: dict[str, Any], case: str, method: str) -> str:
    """The relative L2 distances of a 2PC row's models to the plaintext runs ("—" otherwise)."""
    values = [
        rows[method]["model_gap_to_plaintext"]
        for rows in result["figures"]["runs"][case].values()
        if "model_gap_to_plaintext" in rows.get(method, {})
    ]
    return ", ".join(f"{v:.3g}" for v in values) if values else "—"
