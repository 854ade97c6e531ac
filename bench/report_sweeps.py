"""The parameter-sweep section of docs/RESULTS.md (Figures 4–6, 8–12): quality in plaintext and
the modelled 2PC cost per parameter value, from bench/results/sweeps.json."""

from __future__ import annotations

from typing import Any

from bench.report_format import GB, fmt, save_figure
from bench.report_section import Part, section, table


def section_sweeps(lines: list[str]) -> None:
    section(
        lines,
        "Parameter sweeps (Figures 4–6, 8–12)",
        Part("sweeps", _sweeps, usable=lambda res: "cost" in res["figures"]),
    )


def _sweeps(lines: list[str], res: dict[str, Any], quick: bool) -> None:
    f = res["figures"]
    lines.append(
        "Quality in plaintext on one MNIST history (MLP, 20 clients, 40 rounds); 2PC cost of the same schedule at "
        f"the CNN size (m = {f['model_size']:,}) from measured per-step costs: TD + RS + (estimated rounds) × UE(B) "
        "+ checks × TC.\n"
    )
    table(
        lines,
        (
            "parameter",
            "value",
            "TER %",
            "BA-ASR %",
            "ARP %",
            "est./check/warm-up rounds",
            "2PC s (TC full)",
            "2PC GB (TC full)",
            "2PC s (TC sample)",
            "2PC GB (TC sample)",
        ),
    )
    for name, rows in f["quality"].items():
        costs = {c["value"]: c for c in f["cost"].get(name, [])}
        for r in rows:
            c = costs.get(r["value"], {})
            full, samp = c.get("tc_full", {}), c.get("tc_sample", {})
            rr = r["rounds"]
            lines.append(
                f"| {name} | {r['value']} | {r['ter']:.1f} | {r['ba_asr']:.1f} | {r['arp']:.1f} | "
                f"{rr['estimate']}/{rr['check']}/{rr['warmup']} | {fmt(full.get('wall_s'), 1)} | "
                f"{fmt((full.get('offline_bytes', 0) + full.get('online_bytes', 0)) / GB)} | "
                f"{fmt(samp.get('wall_s'), 1)} | "
                f"{fmt((samp.get('offline_bytes', 0) + samp.get('online_bytes', 0)) / GB)} |"
            )
    import matplotlib.pyplot as plt

    names = list(f["quality"])
    fig, axes = plt.subplots(2, len(names), figsize=(3.2 * len(names), 6))
    for k, name in enumerate(names):
        rows = f["quality"][name]
        xs = [r["value"] for r in rows]
        axes[0][k].plot(xs, [r["ter"] for r in rows], "o-", label="TER %")
        axes[0][k].plot(xs, [r["ba_asr"] for r in rows], "s-", label="BA-ASR %")
        axes[0][k].set_title(name)
        cost = f["cost"].get(name, [])
        axes[1][k].plot([c["value"] for c in cost], [c["tc_full"]["wall_s"] for c in cost], "o-", label="TC full")
        axes[1][k].plot(
            [c["value"] for c in cost], [c["tc_sample"]["wall_s"] for c in cost], "s-", label="TC sample-first"
        )
        axes[1][k].set_xlabel(name)
    axes[0][0].legend(fontsize=7)
    axes[1][0].legend(fontsize=7)
    if f.get("failures"):
        lines.append(f"\nMeasurements that failed: {f['failures']}.\n")
    axes[1][0].set_ylabel("2PC job seconds (model)")
    fig.suptitle("Starfish parameter sweeps: quality (plaintext, MNIST MLP) and 2PC cost (CNN size)")
    lines.append(f"\n![sweeps]({save_figure(fig, 'sweeps', res, quick)})\n")
