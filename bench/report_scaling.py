"""The scaling section of docs/RESULTS.md: how an unlearning job's per-step 2PC cost grows with
the model size m, the clients n and the stored rounds T (bench/results/scaling.json), the fitted
cost model, the whole-job composite and docs/figures/scaling.png."""

from __future__ import annotations

from typing import Any

from bench.report_format import GB, fmt, save_figure
from bench.report_section import Part, row, section, table
from bench.scaling_model import TERMS, total_bytes

AXES = ("m", "n", "T")
STEPS = tuple(TERMS)
MB = 1e6


def section_scaling(lines: list[str]) -> None:
    section(lines, "Scaling of a job's 2PC cost in m, n and T", Part("scaling", _body))


def _body(lines: list[str], res: dict[str, Any], quick: bool) -> None:
    grid = res["meta"]["params"]["grid"]
    axes = "; ".join(
        f"{axis} ∈ {{{', '.join(f'{v:,}' for v in g['values'])}}} at "
        + ", ".join(f"{k} = {v:,}" for k, v in g["fixed"].items())
        + ("" if g["ue_tc"] else " (TD and RS only: the other steps do not depend on T)")
        for axis, g in grid.items()
    )
    lines.append(
        "One axis varies, the others stay fixed: "
        f"{axes}. Each point runs in a fresh dealer and two party processes (loopback) the real steps on "
        "synthetic Gaussian uploads, one target and n − 1 remaining clients, Starfish's default parameters "
        "(B 2 pairs per client; RS with the comparison the defaults use at that T); the same steps on the "
        "plaintext backend in one process. UE-first rebuilds every client's compact form (SecMI); UE is the "
        "steady round; both include the FedAvg reveal. Bytes = offline + online, party 0's view. Peak RSS = "
        "VmHWM of each party process after its steps (it includes the plaintext history the benchmark "
        "generates in it).\n"
    )
    _points_table(lines, res["figures"])
    _steps_table(lines, res["figures"]["points"])
    _fits_table(lines, res["figures"]["fits"])
    _memory_lines(lines, res["figures"])
    path = _figure(res, quick)
    lines.append(f"\n![scaling]({path})\n")


def _points_table(lines: list[str], figures: dict[str, Any]) -> None:
    lines.append(
        "\nWhole-job composite per point (`bench/scaling_model.py`): TD + RS + UE-first + (T − B − 2)·UE + "
        "checks·TC, where of the T replayed rounds (σ 1) round 1 is degenerate, rounds 2..B+1 are warm-up and "
        "the T − B − 1 others run SecUE, those with t ≡ 0 mod T_c = ⌈0.3T⌉ also SecTC (full pass). Warm-up "
        "pair additions, the recovery round's reveal and corrections (they depend on the flags) are not in it.\n"
    )
    peaks = {(p["m"], p["n"], p["T"]): p["peak_rss_bytes"] for p in figures["points"]}
    table(
        lines,
        ("m", "n", "T", "SecUE rounds", "checks", "job 2PC s", "job GB", "job plaintext s", "peak RSS p0 / p1 GB"),
    )
    for c in figures["composite"]:
        peak = peaks[(c["m"], c["n"], c["T"])]
        cells = [f"{c['m']:,}", c["n"], c["T"], c["schedule"]["estimated"], c["schedule"]["checks"]]
        cells += [fmt(c["wall_s"]), fmt(c["bytes"] / GB, 3), fmt(c["plain_wall_s"], 3)]
        cells.append(f"{peak['party0'] / GB:.2f} / {peak['party1'] / GB:.2f}")
        lines.append(row(cells))


def _steps_table(lines: list[str], points: list[dict[str, Any]]) -> None:
    lines.append("\nPer step and point:\n")
    table(lines, ("m", "n", "T", "step", "2PC s", "offline s", "offline MB", "online MB", "rounds", "plaintext s"))
    for p in points:
        for step in STEPS:
            c = p["steps"].get(step)
            if c is None:
                continue
            cells = [f"{p['m']:,}", p["n"], p["T"], step, fmt(c["wall_s"]), fmt(c["offline_s"])]
            cells += [fmt(c["offline_bytes"] / MB, 1), fmt(c["online_bytes"] / MB, 1), int(c["online_rounds"])]
            cells.append(fmt(p["plain_wall_s"][step], 4))
            lines.append(row(cells))


def _fits_table(lines: list[str], fits: dict[str, Any]) -> None:
    lines.append("\nFitted model, y = a·term + b by least squares over every point that ran the step:\n")
    table(lines, ("step", "term", "2PC s: a", "b", "R²", "bytes: a", "b", "R²", "plaintext s: a", "R²"))
    for step, f in fits.items():
        cells: list[Any] = [step, f["term"]]
        for key in ("wall_s", "bytes", "plain_wall_s"):
            fit = f[key]
            if fit is None:
                cells += ["—"] * (2 if key == "plain_wall_s" else 3)
            elif key == "plain_wall_s":
                cells += [f"{fit['slope']:.3g}", fmt(fit["r2"], 3)]
            else:
                cells += [f"{fit['slope']:.3g}", f"{fit['intercept']:.3g}", fmt(fit["r2"], 3)]
        lines.append(row(cells))


def _memory_lines(lines: list[str], figures: dict[str, Any]) -> None:
    """The fitted peak RSS per party process and the points skipped for memory."""
    fit = figures.get("rss_fit")
    if fit is not None:
        lines.append(
            f"\nPeak RSS per party process ≈ {fit['slope']:.3g} B × (n−1)·m + {fit['intercept'] / GB:.2f} GB "
            f"(R² {fit['r2']:.3f}, {fit['points']} points).\n"
        )
    for p in figures.get("skipped", []):
        lines.append(f"\nNot measured: m = {p['m']:,}, n = {p['n']}, T = {p['T']} — {p['reason']}.\n")


def _figure(res: dict[str, Any], quick: bool) -> str:
    """Log-log time (2PC solid, plaintext dashed) and bytes of every step against each axis."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(13, 7.5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for col, axis in enumerate(AXES):
        on_axis = sorted((p for p in res["figures"]["points"] if axis in p["axes"]), key=lambda p: p[axis])
        for k, step in enumerate(STEPS):
            pts = [p for p in on_axis if step in p["steps"]]
            if not pts:
                continue
            xs, color = [p[axis] for p in pts], colors[k % len(colors)]
            axes[0][col].plot(xs, [p["steps"][step]["wall_s"] for p in pts], "o-", color=color, label=f"{step} 2PC")
            axes[0][col].plot(xs, [p["plain_wall_s"][step] for p in pts], "x--", color=color, label=f"{step} plain")
            axes[1][col].plot(xs, [total_bytes(p["steps"][step]) / GB for p in pts], "o-", color=color, label=step)
        values = sorted({p[axis] for p in on_axis})
        for r, ylabel in enumerate(("seconds", "GB (offline + online)")):
            axes[r][col].set_xscale("log")
            axes[r][col].set_yscale("log")
            axes[r][col].set_xticks(values, [f"{v:,}" for v in values], fontsize=7)
            axes[r][col].minorticks_off()
            axes[r][col].set_xlabel(axis)
            axes[r][col].set_ylabel(ylabel)
    axes[0][0].legend(fontsize=6, ncol=2)
    axes[1][0].legend(fontsize=6)
    fig.suptitle("Per-step cost against m, n and T: 2PC (solid) and plaintext (dashed)")
    fig.subplots_adjust(wspace=0.35, hspace=0.3)
    return save_figure(fig, "scaling", res, quick, bottom=0.14)
