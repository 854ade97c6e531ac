"""The per-step cost section of docs/RESULTS.md (Tables I and VII): one unlearning round's steps
under 2PC beside the paper's, from bench/results/unlearning_cost.json."""

from __future__ import annotations

from typing import Any

from bench.report_format import GB, fmt, ratio, save_figure, verdict
from bench.report_section import Part, row, section, table

STEP_ORDER = ["TD", "RS1", "RS2", "UE", "TC", "TC-sample"]


def section_steps(lines: list[str]) -> None:
    section(lines, "Per-step 2PC cost of one unlearning round (Tables I and VII)", Part("unlearning_cost", _steps))


def _steps(lines: list[str], res: dict[str, Any], quick: bool) -> None:
    lines.append(
        "20 clients (19 remaining), T = 40 stored rounds, σ 0.6, B 2; a dealer and two party processes on "
        "loopback; synthetic Gaussian uploads of the model's size (the cost does not depend on the values). "
        "Offline = time and bytes of fetching correlated randomness from the dealer (dealer → party 0; party 1 "
        "expands a seed); online = the rest (party 0 ↔ party 1). TC is Algorithm 3 on all 19 × m coordinates; "
        "TC-sample checks 4,096 public random coordinates per client first (same flags, one extra revealed bit "
        "per client). Paper: ABY, LAN.\n"
    )
    table(
        lines,
        (
            "dataset (m)",
            "step",
            "ours offline s",
            "ours online s",
            "ours offline GB",
            "ours online GB",
            "paper offline s",
            "paper online s",
            "paper offline GB",
            "paper online GB",
            "total time ratio",
            "total bytes ratio",
        ),
    )
    import matplotlib.pyplot as plt

    datasets = list(res["figures"])
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6))
    width = 0.8 / (2 * len(datasets))
    for d_idx, ds in enumerate(datasets):
        r = res["figures"][ds]
        lines.extend(_step_rows(ds, r))
        off = (2 * d_idx) * width - 0.4
        _step_bars(axes[0], "time", r, off, width, ds)
        _step_bars(axes[1], "bytes", r, off, width, ds)
    target = _tc_target_line(res["figures"].get("mnist"))
    if target:
        lines.append(target)
    axes[0].legend(fontsize=6, ncol=2)
    fig.suptitle("One unlearning round, per step: ours (CrypTen, 2 cores) vs paper (ABY, LAN)")
    path = save_figure(fig, "unlearning_cost", res, quick)
    lines.append(f"\n![per-step cost]({path})\n")


def _paper_step(r: dict[str, Any], step: str) -> dict[str, float] | None:
    """The paper's figure for a step (the sample-first pass is compared with the paper's full TC)."""
    return r["paper"].get(step) or (r["paper"]["TC"] if step == "TC-sample" else None)


def _step_rows(ds: str, r: dict[str, Any]) -> list[str]:
    rows = []
    for step in STEP_ORDER:
        c = r["steps"].get(step)
        if c is None:
            continue
        p = _paper_step(r, step)
        ours_t, ours_b = c["wall_s"], c["offline_bytes"] + c["online_bytes"]
        cells = [
            f"{ds} ({r['m']:,})",
            step,
            fmt(c["offline_s"]),
            fmt(c["online_s"]),
            fmt(c["offline_bytes"] / GB, 3),
            fmt(c["online_bytes"] / GB, 3),
        ]
        if p is not None:
            cells += [
                fmt(p["offline_s"]),
                fmt(p["online_s"]),
                fmt(p["offline_gb"]),
                fmt(p["online_gb"]),
                ratio(ours_t, p["offline_s"] + p["online_s"]),
                ratio(ours_b, (p["offline_gb"] + p["online_gb"]) * GB),
            ]
        else:
            cells += ["—"] * 6
        rows.append(row(cells))
    return rows


def _step_bars(ax: Any, key: str, r: dict[str, Any], off: float, width: float, ds: str) -> None:
    """Ours beside the paper per step, time or bytes (offline + online), on a log scale."""

    def ours_value(step: str) -> float:
        c = r["steps"].get(step)
        if c is None:
            return 0
        return c["wall_s"] if key == "time" else (c["offline_bytes"] + c["online_bytes"]) / GB

    def paper_value(step: str) -> float:
        p = _paper_step(r, step)
        if p is None:
            return 0
        return p["offline_s"] + p["online_s"] if key == "time" else p["offline_gb"] + p["online_gb"]

    xs = range(len(STEP_ORDER))
    ax.bar([x + off for x in xs], [ours_value(s) for s in STEP_ORDER], width, label=f"ours {ds}")
    ax.bar([x + off + width for x in xs], [paper_value(s) for s in STEP_ORDER], width, label=f"paper {ds}", alpha=0.5)
    ax.set_xticks(list(xs), STEP_ORDER)
    ax.set_yscale("log")
    ax.set_ylabel("seconds (offline + online)" if key == "time" else "GB (offline + online)")


def _tc_target_line(mnist: dict[str, Any] | None) -> str:
    if mnist is None or "TC" not in mnist["steps"]:
        return ""
    tc = mnist["steps"]["TC"]["wall_s"]
    sample = mnist["steps"].get("TC-sample")
    extra = f" (sample-first pass: {sample['wall_s']:.1f} s)" if sample is not None else ""
    tc_verdict = verdict(tc / 60.0)
    return f"\nTarget: SecTC on 19 × {mnist['m']:,} coordinates ≤ 60 s — measured {tc:.1f} s: {tc_verdict}{extra}.\n"
