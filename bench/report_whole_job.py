"""The whole-job section of docs/RESULTS.md (Table II): one Starfish unlearning job at the paper's
MNIST setting through the real service (`whole_job_service`) and on the two-party runner
(`whole_job`), its cost beside the paper's, its targets, fidelity and where its time goes."""

from __future__ import annotations

from functools import partial
from typing import Any

from bench.report_format import GB, fmt, ratio, save_figure, verdict
from bench.report_section import Part, section, table


def section_whole_job(lines: list[str]) -> None:
    """Table II analogue: through the real service (preferred) and on the two-party cluster."""
    section(
        lines,
        "A whole unlearning job at the paper's MNIST setting (Table II)",
        Part("whole_job_service", partial(_whole_job, name="whole_job_service"), "Through the real service"),
        Part("whole_job", partial(_whole_job, name="whole_job"), "On the two-party runner (mpc.cluster)"),
    )


def _whole_job(lines: list[str], res: dict[str, Any], quick: bool, name: str) -> None:
    f = res["figures"]
    _whole_job_setting(lines, res, quick, name)
    _whole_job_costs(lines, f)
    _whole_job_targets(lines, f)
    _whole_job_fidelity(lines, f)
    _whole_job_steps(lines, f["secure"])
    lines.append(f"\n![whole job]({_whole_job_figure(f, res, quick, name)})\n")


def _whole_job_setting(lines: list[str], res: dict[str, Any], quick: bool, name: str) -> None:
    f = res["figures"]
    if "load_during_job" in f:
        load = f["load_during_job"]
        waited = f" (after waiting {load['waited_s']} s for Stage I's load to decay)" if "waited_s" in load else ""
        lines.append(f"Load average when the job was filed: {load['before']}{waited}; at its end: {load['after']}.\n")
    lines.append(
        f"History: {f['clients']} clients (one backdoored target), T = {f['stored_rounds']} rounds, model of "
        f"{f['m']:,} parameters; unlearned with σ 0.6, α 0.4, β 0.1, B 2 and the SecTC sample-first pass. "
        f"Path: {res['meta']['params'].get('path')}.\n"
    )
    before = f.get("before") or {}
    if "ter" in before:
        lines.append(
            f"Before unlearning (M_T): test error {100 * before['ter']:.1f} %, backdoor success "
            f"{100 * before.get('ba_asr', float('nan')):.1f} %.\n"
        )
    if name == "whole_job_service":
        lines.append(
            f"Stage I through the service took {f['stage1_seconds']:.0f} s ({f['stage1_client_bytes'] / GB:.2f} GB of "
            f"client shares, {f['stage1_peer_bytes'] / 1e6:.1f} MB party↔party). The job's wall time is the admin's "
            "view from filing to success: session start, 2PC, the remaining clients' warm-up and correction "
            "tasks (SDK threads on the same 2 cores), install of M̂ and erasure.\n"
        )
    else:
        lines.append(
            "Client work (the remaining clients' exact gradients for warm-up and corrections, computed by "
            "party 0 on one core) is listed apart. Party 0 ran under cProfile.\n"
        )


def _whole_job_costs(lines: list[str], f: dict[str, Any]) -> None:
    """Ours (2PC and plaintext) beside the paper's Table II, and the ratio."""
    s, p, paper = f["secure"], f["plain"], f["paper"]
    total_b = s["offline_bytes"] + s["online_bytes"]
    paper_s, paper_gb = paper["offline_s"] + paper["online_s"], paper["offline_gb"] + paper["online_gb"]
    wall_detail = f" (2PC {fmt(s['mpc_s'])} + clients {fmt(s['client_s'])})" if "mpc_s" in s else ""
    table(lines, ("", "offline s", "online s", "total wall s", "offline GB", "online GB", "total GB"))
    lines.append(
        f"| ours, 2PC | {fmt(s['offline_s'])} | {fmt(s['online_s'])} | {fmt(s['wall_s'])}{wall_detail} | "
        f"{fmt(s['offline_bytes'] / GB, 3)} | {fmt(s['online_bytes'] / GB, 3)} | {fmt(total_b / GB, 3)} |"
    )
    lines.append(
        f"| ours, plaintext (same job) | — | — | {fmt(p['wall_s'])} (algorithm {fmt(p['algorithm_s'])} + clients "
        f"{fmt(p['client_s'])}) | — | — | — |"
    )
    lines.append(
        f"| paper, ABY LAN | {fmt(paper['offline_s'])} | {fmt(paper['online_s'])} | {fmt(paper_s)} | "
        f"{fmt(paper['offline_gb'])} | {fmt(paper['online_gb'])} | {fmt(paper_gb)} |"
    )
    lines.append(
        f"| ours / paper | {ratio(s['offline_s'], paper['offline_s'])} | {ratio(s['online_s'], paper['online_s'])} | "
        f"{ratio(s['wall_s'], paper_s)} | {ratio(s['offline_bytes'], paper['offline_gb'] * GB)} | "
        f"{ratio(s['online_bytes'], paper['online_gb'] * GB)} | {ratio(total_b, paper_gb * GB)} |\n"
    )


def _whole_job_targets(lines: list[str], f: dict[str, Any]) -> None:
    s, tg, ratio = f["secure"], f["targets"], f["ratio"]["wall"]
    total_gb = (s["offline_bytes"] + s["online_bytes"]) / GB
    lines.append("Targets (2 cores, no GPU):\n")
    table(lines, ("target", "measured", "met?"))
    wall_verdict = verdict(s["wall_s"] / tg["wall_s_max"])
    lines.append(f"| whole job ≤ {tg['wall_s_max']:g} s wall | {s['wall_s']:.1f} s | {wall_verdict} |")
    traffic_verdict = verdict(total_gb / tg["traffic_gb_max"])
    lines.append(f"| traffic ≤ {tg['traffic_gb_max']:g} GB | {total_gb:.2f} GB | {traffic_verdict} |")
    extra = f" (without client work {f['ratio']['without_clients']:.2f}×)" if "without_clients" in f["ratio"] else ""
    ratio_verdict = verdict(ratio / tg["ratio_max"])
    lines.append(f"| 2PC ≤ {tg['ratio_max']:g}× plaintext | {ratio:.2f}×{extra} | {ratio_verdict} |")
    peaks = f.get("peak_rss_bytes") or {}
    if peaks and "peak_rss_gb_max" in tg:
        top = max(peaks.values()) / GB
        each = ", ".join(f"{name} {b / GB:.2f}" for name, b in sorted(peaks.items()))
        rss_verdict = verdict(top / tg["peak_rss_gb_max"])
        lines.append(f"| process memory ≤ {tg['peak_rss_gb_max']:g} GB peak | {each} GB | {rss_verdict} |")
    lines.append("")


def _whole_job_fidelity(lines: list[str], f: dict[str, Any]) -> None:
    """What dominates the ledger, and how close the 2PC run is to the plaintext one."""
    s, p = f["secure"], f["plain"]
    total_s = sum(c["seconds"] for c in s["steps"].values()) or 1.0
    share = sorted(((c["seconds"] / total_s, step) for step, c in s["steps"].items()), reverse=True)[:3]
    total_traffic = sum(c["offline_bytes"] + c["online_bytes"] for c in s["steps"].values()) or 1.0
    share_b = sorted(
        (((c["offline_bytes"] + c["online_bytes"]) / total_traffic, step) for step, c in s["steps"].items()),
        reverse=True,
    )[:2]
    lines.append(
        "What dominates: "
        + ", ".join(f"{step} {100 * x:.0f} %" for x, step in share)
        + " of the ledger's time; "
        + ", ".join(f"{step} {100 * x:.0f} %" for x, step in share_b)
        + " of the traffic.\n"
    )
    a = f["agreement"]
    flags = f"; same correction flags: {a['same_flags']}" if "same_flags" in a else ""
    history = (
        f" (the two histories themselves differ by {a['history_gap']['relative']:.1e})" if "history_gap" in a else ""
    )
    lines.append(
        f"Fidelity: same selected rounds as plaintext: {a['same_selection']}{flags}; "
        f"‖M̂_2PC − M̂_plain‖/‖M̂_plain‖ = {a['model_gap']['relative']:.2e}{history}"
        f". TER {100 * s['metrics']['ter']:.1f} % (plaintext {100 * p['metrics']['ter']:.1f} %, before "
        f"{100 * f['before']['ter']:.1f} %), BA-ASR {100 * s['metrics']['ba_asr']:.1f} % (plaintext "
        f"{100 * p['metrics']['ba_asr']:.1f} %, before {100 * f['before']['ba_asr']:.1f} %), "
        f"ARP {s['arp_percent']:.1f} %.\n"
    )


def _whole_job_steps(lines: list[str], s: dict[str, Any]) -> None:
    lines.append("Where the 2PC time goes (party 0's ledger):\n")
    table(lines, ("step", "calls", "wall s", "offline s", "offline GB", "online GB", "rounds"))
    for step, c in sorted(s["steps"].items(), key=lambda kv: -kv[1]["seconds"]):
        lines.append(
            f"| {step} | {c['calls']} | {fmt(c['seconds'])} | {fmt(c['offline_seconds'])} | "
            f"{fmt(c['offline_bytes'] / GB, 3)} | {fmt(c['online_bytes'] / GB, 3)} | {c['online_rounds']} |"
        )
    prof = s.get("profile_party0") or []
    if prof:
        lines.append("\nParty 0's profile (cProfile, top functions by own time):\n")
        table(lines, ("function", "own s", "cumulative s", "calls"))
        for row in prof[:12]:
            lines.append(f"| `{row['function']}` | {fmt(row['own_s'])} | {fmt(row['cumulative_s'])} | {row['calls']} |")


def _whole_job_figure(f: dict[str, Any], res: dict[str, Any], quick: bool, name: str) -> str:
    import matplotlib.pyplot as plt

    s, p, paper, tg = f["secure"], f["plain"], f["paper"], f["targets"]
    total_b = s["offline_bytes"] + s["online_bytes"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    axes[0].bar(
        ["ours 2PC", "ours plaintext", "paper (ABY)"],
        [s["wall_s"], p["wall_s"], paper["offline_s"] + paper["online_s"]],
        color=["C0", "C2", "C1"],
    )
    axes[0].set_yscale("log")
    axes[0].set_ylabel("seconds")
    axes[0].axhline(tg["wall_s_max"], color="k", ls="--", lw=0.8)
    axes[1].bar(
        ["ours 2PC", "paper (ABY)"], [total_b / GB, paper["offline_gb"] + paper["online_gb"]], color=["C0", "C1"]
    )
    axes[1].set_yscale("log")
    axes[1].set_ylabel("GB")
    axes[1].axhline(tg["traffic_gb_max"], color="k", ls="--", lw=0.8)
    fig.suptitle("Whole Starfish unlearning job, paper MNIST setting (dashed: targets)")
    return save_figure(fig, name, res, quick)
