"""The switching-threshold section of docs/RESULTS.md: the per-operation cost fits, round
selection (SecRS) by both methods, and the threshold T_δ between them, from
bench/results/switching.json."""

from __future__ import annotations

from typing import Any

from bench.report_format import save_figure
from bench.report_section import Part, section, table


def section_switching(lines: list[str]) -> None:
    section(lines, "Switching threshold T_δ of round selection", Part("switching", _switching))


def _switching(lines: list[str], res: dict[str, Any], quick: bool) -> None:
    f = res["figures"]
    lines.append("Per-operation cost, fitted as latency + n × per element (wall seconds):\n")
    table(lines, ("op", "latency s", "per element µs", "rounds", "bytes per element"))
    for op, fit in f["fits"].items():
        lines.append(
            f"| {op} | {fit['seconds']['latency']:.3f} | {1e6 * fit['seconds']['per_element']:.2f} | "
            f"{fit['rounds']['latency']:.0f} | {fit['bytes']['per_element']:.0f} |"
        )
    lines.append("\nRound selection (SecRS) measured with both methods:\n")
    table(
        lines,
        ("T", "comparators", "Method 1 s", "Method 2 s", "Method 1 MB", "Method 2 MB", "model M1 s", "model M2 s"),
    )
    for r in f["selection"]:
        lines.append(
            f"| {r['T']} | {r['comparators']} | {r['method1']['seconds']:.2f} | {r['method2']['seconds']:.2f} | "
            f"{r['method1']['bytes'] / 1e6:.2f} | {r['method2']['bytes'] / 1e6:.2f} | "
            f"{r['model_seconds']['method1']:.2f} | {r['model_seconds']['method2']:.2f} |"
        )
    th = f["threshold"]
    from unlearning.starfish.params import DEFAULT_SWITCH_THRESHOLD

    def first(value: Any) -> str:
        return "never in the measured range" if value is None else f"T = {value}"

    lines.append(
        f"\nThresholds: the paper's rule (Method 1 iff T·C_SecDiv ≥ 2·n_comp(T)·C_SecMul) with our per-element "
        f"costs gives T_δ = {th['paper_rule_time']} by time and {th['paper_rule_bytes']} by bytes; the batched "
        f"latency model gives Method 2 faster from {first(th['batched_model_time_first_T_method2_faster'])}; "
        f"measured: Method 2 first faster at {first(th['measured_time_first_T_method2_faster'])}, first smaller "
        f"at {first(th['measured_bytes_first_T_method2_smaller'])}. The default "
        f"`StarfishParams.switch_threshold` is {DEFAULT_SWITCH_THRESHOLD}.\n"
    )
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    Ts = [r["T"] for r in f["selection"]]
    for method, color in (("method1", "C0"), ("method2", "C1")):
        ax.plot(Ts, [r[method]["seconds"] for r in f["selection"]], "o-", color=color, label=f"{method} measured")
        ax.plot(
            Ts, [r["model_seconds"][method] for r in f["selection"]], "--", color=color, label=f"{method} batched model"
        )
    ax.set_xscale("log", base=2)
    ax.set_xlabel("stored rounds T")
    ax.set_ylabel("SecRS seconds")
    ax.legend(fontsize=7)
    fig.suptitle("Round selection: Method 1 (SecGE2) vs Method 2 (SecDiv + SecGE)")
    lines.append(f"![switching]({save_figure(fig, 'switching', res, quick)})\n")
