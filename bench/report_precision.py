"""The precision section of docs/RESULTS.md: whole jobs and SecMul fault counts against the
fractional bits f of the fixed-point encoding, from bench/results/precision.json."""

from __future__ import annotations

from typing import Any

from bench.report_format import fmt, save_figure
from bench.report_section import Part, section, table


def section_precision(lines: list[str]) -> None:
    section(lines, "Precision study: fractional bits f", Part("precision", _precision))


def _precision(lines: list[str], res: dict[str, Any], quick: bool) -> None:
    f = res["figures"]
    mags = res["meta"]["params"]["magnitudes"]
    lines.append(
        "Whole Starfish jobs under 2PC against the plaintext run on the same history (8×8 digits, 20 clients), "
        "and SecMul fault counts for operands |x|, |y| ≤ 2^k:\n"
    )
    lines.extend(_precision_rows(f, mags))
    lines.append(
        "\nFaults: outputs off by more than 2^(62−2f) (a truncation fault adds ±2^(64−2f)); † the "
        "untruncated product can leave the ring (2k + 2f ≥ 63), so such outputs are wrong without any fault. "
        "‖g‖² is computed for 582,026 coordinates of size ≈ 10⁻³ either as one dot product truncated once "
        "(what `unlearning.lbfgs.squared_norms` does) or coordinate by coordinate (each square truncated).\n"
    )
    lines.append(f"\n![precision]({_precision_figure(f, mags, res, quick)})\n")


def _precision_rows(f: dict[str, Any], mags: list[int]) -> list[str]:
    rows: list[str] = []
    header = ["f", "job", "rel. model gap", "same selection", "flag agreement", "‖g‖² rel. error (dot)"]
    table(rows, (*header, "‖g‖² rel. error (per coordinate)", *(f"faults k={k}" for k in mags)))
    for b in sorted(f["bits"], key=int):
        row = f["bits"][b]
        job = row["job"]
        faults = row["faults"]["products"]
        n = faults[str(mags[0])]["n"]
        counts = [f"{faults[str(k)]['faults']}/{n:,}{'†' if faults[str(k)].get('overflow') else ''}" for k in mags]
        rows.append(
            f"| {b} | {job['outcome']} | {fmt(job.get('model_gap', {}).get('relative'))} | "
            f"{job.get('same_selection', '—')} | {fmt(job.get('flag_agreement'))} | "
            f"{fmt(row['faults']['norm2']['dot_rel_error'])} | "
            f"{fmt(row['faults']['norm2']['per_coordinate_rel_error'])} | " + " | ".join(counts) + " |"
        )
    return rows


def _precision_figure(f: dict[str, Any], mags: list[int], res: dict[str, Any], quick: bool) -> str:
    import matplotlib.pyplot as plt

    bits = sorted(f["bits"], key=int)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    gaps = [f["bits"][b]["job"].get("model_gap", {}).get("relative") for b in bits]
    axes[0].semilogy([int(b) for b, g in zip(bits, gaps, strict=True) if g], [g for g in gaps if g], "o-")
    axes[0].set_xlabel("fractional bits f")
    axes[0].set_ylabel("‖M̂_2PC − M̂_plain‖ / ‖M̂_plain‖")
    for k in mags:
        products = [(int(b), f["bits"][b]["faults"]["products"][str(k)]) for b in bits]
        pts = [(b, max(p["faults"], 0.5) / p["n"]) for b, p in products if not p.get("overflow")]
        axes[1].semilogy([p[0] for p in pts], [p[1] for p in pts], "o-", label=f"|x|,|y| ≤ 2^{k}")
    axes[1].set_xlabel("fractional bits f")
    axes[1].set_ylabel("SecMul fault rate (0 plotted at 0.5/n)")
    axes[1].legend(fontsize=7)
    fig.suptitle("Fixed-point precision: fidelity and truncation faults")
    return save_figure(fig, "precision", res, quick)
