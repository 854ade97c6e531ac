"""The forgetting-quality section of docs/RESULTS.md (Figure 3): every method over seeds,
mean ± standard deviation, from bench/results/quality_compare.json."""

from __future__ import annotations

from typing import Any

from bench.report_format import save_figure
from bench.report_section import Part, section, table


def section_quality(lines: list[str]) -> None:
    section(lines, "Forgetting quality of every method (Figure 3)", Part("quality_compare", _quality))


def _quality(lines: list[str], res: dict[str, Any], quick: bool) -> None:
    f = res["figures"]
    lines.append(
        f"Real MNIST (5k subset), 20 clients with one backdoored target, 40 rounds, MLP; seeds {f['seeds']}; "
        "mean ± sample standard deviation (percent; time in seconds). `before` is the model before unlearning.\n"
    )
    table(lines, ("method", "TER %", "BA-ASR %", "MIA-ASR %", "ARP %", "time s"))
    summary = f["summary"]
    for method, vals in summary.items():
        cells = [
            f"{vals[k]['mean']:.1f} ± {vals[k]['std']:.1f}" for k in ("ter", "ba_asr", "mia_asr", "arp", "seconds")
        ]
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    if f.get("diverged"):
        lines.append(f"\nFailed or diverged runs (count over seeds): {f['diverged']}.")
    import matplotlib.pyplot as plt

    methods = list(summary)
    fig, axes = plt.subplots(1, 4, figsize=(14, 5.2))
    for ax, (key, title) in zip(
        axes, (("ter", "TER %"), ("ba_asr", "BA-ASR %"), ("mia_asr", "MIA-ASR %"), ("arp", "ARP %")), strict=True
    ):
        ax.bar(
            range(len(methods)),
            [summary[m][key]["mean"] for m in methods],
            yerr=[summary[m][key]["std"] for m in methods],
            capsize=2,
            color=[f"C{i % 10}" for i in range(len(methods))],
        )
        ax.set_xticks(range(len(methods)), methods, rotation=60, ha="right", fontsize=7)
        ax.set_title(title)
    fig.subplots_adjust(wspace=0.3)
    fig.suptitle(f"Unlearning quality on MNIST, mean ± std over {len(f['seeds'])} seed(s)")
    fig.tight_layout(rect=(0, 0.08, 1, 0.95))
    lines.append(f"\n![quality]({save_figure(fig, 'quality', res, quick, bottom=None)})\n")
