"""The "Update estimation round" section of docs/RESULTS.md (from bench/results/ue_round*.json).

`ue_round.json` is the current code; `ue_round_baseline.json`, when present, is the same
benchmark run on the code before the restructured round (its `meta.params.code` names it).
"""

from __future__ import annotations

from typing import Any

from bench.env import read_result
from bench.report_format import fmt
from bench.report_section import Part, section, table

MB = 1e6
#: one UE round at the paper's MNIST size: wall seconds and online + offline bytes
TARGET_WALL_S, TARGET_BYTES = 1.0, 50e6
STEP_LABELS = {
    "pairs": "B = 2 pairs enter every buffer (add_pairs × 2)",
    "first": "first UE round after the buffers changed (forms rebuilt: one SecMI batch), every client's estimate",
    "ahead": "estimate round, only the update Σ ω_j ĝ^j, drawing the next round's pair ahead",
    "round": "steady-state UE round, only the update (one UE round)",
    "rows": "steady-state round with every client's estimate (a check round, or DP)",
}


#: a run from before the estimate round formed only the update (no "rows" step): its round had every row
EARLIER_LABELS = {
    **STEP_LABELS,
    "first": "first UE round after the buffers changed (forms rebuilt: one SecMI batch)",
    "round": "steady-state UE round, every client's estimate (one UE round then)",
}


def _rows(label: str, res: dict[str, Any]) -> list[str]:
    out = []
    code = res["meta"]["params"].get("code", "unknown")
    labels = STEP_LABELS if "rows" in res["figures"]["steps"] else EARLIER_LABELS
    for step, c in res["figures"]["steps"].items():
        out.append(
            f"| {label} ({code}) | {labels.get(step, step)} | {fmt(c['wall_s'])} | {fmt(c['offline_s'])} | "
            f"{fmt(c['online_bytes'] / MB, 1)} | {fmt(c['offline_bytes'] / MB, 1)} | {c['online_rounds']} |"
        )
    return out


def target_line(r: dict[str, Any], rss: dict[str, int]) -> str:
    """The target verdict for one UE round (`figures.ue_round`) and the parties' peak RSS."""
    total = r["online_bytes"] + r["offline_bytes"]
    met = r["wall_s"] <= TARGET_WALL_S and total <= TARGET_BYTES
    peaks = ", ".join(f"{k} {fmt(v / 2**30)} GiB" for k, v in rss.items()) or "not recorded"
    return (
        f"Target: one UE round ≤ {TARGET_WALL_S:g} s and ≤ {TARGET_BYTES / MB:g} MB — measured "
        f"{fmt(r['wall_s'])} s and {fmt(total / MB, 1)} MB: {'met' if met else 'not met'}. Peak RSS: {peaks}."
    )


def section_ue_round(lines: list[str]) -> None:
    section(lines, "Update estimation round (SecUE at the paper's MNIST size)", Part("ue_round", _ue_round))


def _ue_round(lines: list[str], res: dict[str, Any], quick: bool) -> None:
    f = res["figures"]
    lines.append(
        f"m = {f['m']:,}, 20 clients (19 remaining), B = 2, synthetic Gaussian uploads; a dealer and two party "
        "processes on loopback. Bytes are party 0's ledger (online: sent + received to party 1; offline: "
        "dealer → party 0). The round is restructured as in docs/ALGORITHM.md §3 (cached compact form per "
        "buffer state, ‖H v̂‖² = cᵀGc, drop bit in the coefficients, Y·c_y and the new rows of YᵀY from "
        "fixed operands: each ŷ opened once, when it enters).\n"
    )
    table(lines, ("code", "step", "wall s", "offline s", "online MB", "offline MB", "rounds"))
    baseline = read_result("ue_round_baseline")
    if baseline is not None and not quick:
        lines.extend(_rows("before", baseline))
    lines.extend(_rows("now", res))
    if baseline is not None and not quick:
        bm = baseline["meta"]
        lines.append(
            f'\nThe "before" rows are this benchmark run on the code before the restructured round, measured '
            f"{bm['date_utc']} UTC at load average {bm['load_average_start']} → {bm['load_average_end']}. At such "
            "loads (far above the 2 cores) wall times are inflated and noisy (the old code's two identical UE "
            "rounds differ by 30 %); bytes and rounds do not depend on the load."
        )
    lines.append("\n" + target_line(f["ue_round"], f.get("peak_rss_bytes", {})) + "\n")
    lines.append(
        'Y·c_y is a fixed-operand product (docs/ALGORITHM.md §3, "Fixed-operand products"): each ŷ is '
        'opened under a mask once, when it enters (the "pairs" row, where that opening replaces the '
        "Beaver openings of the new YᵀY rows), and a round opens only c_y. A round in which nothing reads a "
        "client's estimate (no SecTC, no DP clipping) forms only the update: one product "
        "[c_y,1 … c_y,n]·[Y_1; …; Y_n] whose C_t = A_t·B_Y has m values, so the dealer sends m values where "
        'the per-client rows ("rows") need n·m. What remains of size m per round is the reveal of the '
        "update (m values each way) online and party 0's share of C_t offline. A pair entry takes the curvature "
        "test's squared norms from the rows fixed for it (the dealer sends one value per row) and opens its rows "
        "once when the step is long (‖s‖ ≥ 1; here ‖s‖ ≈ 7.6), twice when it is short (the raw rows for the test, "
        "then the kept ŷ).\n"
    )
