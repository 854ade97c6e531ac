"""The multi-host section of docs/RESULTS.md: the whole job on loopback, LAN and WAN links."""

from __future__ import annotations

from typing import Any

from bench.report_format import fmt, save_figure
from bench.report_section import Part, row, section, table

MB = 1e6
SHORT = {"loopback": "one host", "lan": "LAN", "wan": "WAN"}
LABELS = {"loopback": "one host (loopback)", "lan": "LAN 1 Gbit/s, 0.5 ms RTT", "wan": "WAN 100 Mbit/s, 40 ms RTT"}


def section_multihost(lines: list[str]) -> None:
    section(
        lines,
        "The whole job with the operators on separate hosts (emulated LAN and WAN)",
        Part("multihost", _multihost),
        requirement=", needs root",
    )


def _multihost(lines: list[str], res: dict[str, Any], quick: bool) -> None:
    f = res["figures"]
    runs = f["profiles"]
    lines.append(
        "The `deploy/` recipe on network namespaces (`harness.netlab`): the dealer service, party0, party1 and the "
        "clients each on their own host, the same saved Stage I history for every run; links shaped with `tbf` and "
        "delayed by a user-space delay line on each link (the kernel has no `netem`), measured party0 → party1 "
        "before each job. "
        + _clients_link(res["meta"])
        + f"Selected rounds identical across the three runs: {'yes' if f['same_selection'] else 'NO'}.\n"
    )
    _table(lines, runs, f["paper_lan"], quick)
    cores = res["meta"]["machine"]["cores"]
    busiest = max(r["load_before"][0] for r in runs.values())  # the load after is the job's own
    if busiest > cores:
        lines.append(
            f"**The machine was busy** (load average up to {busiest:g} on {cores} cores when a job was filed): "
            "wall times include waiting for a CPU and are not comparable between the columns; bytes, rounds and the "
            "measured links are. Re-run on an idle machine for the times.\n"
        )
    _latency(lines, f["latency"], runs)
    lines.append(f"\n![multihost]({_plot(res, quick)})\n")


def _clients_link(meta: dict[str, Any]) -> str:
    """How the clients' host was linked (older runs put every client behind one profile link)."""
    if "clients_link" in meta.get("params", {}):
        return (
            "The clients' host stands for one host per client: its link has the profile's rate once per client "
            "and the profile's delay, so the parties' own links limit the clients' traffic. "
        )
    return "All clients shared one link of the profile's rate (the clients' host had one host's link). "


def _table(lines: list[str], runs: dict[str, Any], paper: dict[str, float], quick: bool) -> None:
    names = [n for n in ("loopback", "lan", "wan") if n in runs]
    paper_col = "paper, LAN (Table II)" + (" — full MNIST, not this size" if quick else "")
    table(lines, ("", *(LABELS[n] for n in names), paper_col))

    def measure(label: str, cells: list[str], paper_cell: str = "—") -> None:
        lines.append(row((label, *cells, paper_cell)))

    def link(n: str, key: str, digits: int) -> str:
        return fmt(runs[n]["link"]["measured"][key], digits) if "link" in runs[n] else "—"

    measure(
        "measured RTT, median (min) ms", [f"{link(n, 'rtt_ms_median', 3)} ({link(n, 'rtt_ms_min', 3)})" for n in names]
    )
    measure("measured throughput, Mbit/s", [link(n, "throughput_mbit", 0) for n in names])
    measure(
        "job wall time, s", [fmt(runs[n]["wall_s"], 1) for n in names], fmt(paper["offline_s"] + paper["online_s"], 1)
    )
    measure("online bytes", [f"{runs[n]['online_bytes'] / MB:,.1f} MB" for n in names], f"{paper['online_gb']:,.2f} GB")
    measure(
        "offline bytes", [f"{runs[n]['offline_bytes'] / MB:,.1f} MB" for n in names], f"{paper['offline_gb']:,.2f} GB"
    )
    measure("online rounds", [f"{runs[n]['online_rounds']:,}" for n in names])
    measure("CPU s, all processes", [fmt(runs[n]["cpu_s_all_processes"], 1) for n in names])
    measure("load average before → after", [f"{runs[n]['load_before'][0]} → {runs[n]['load_after'][0]}" for n in names])
    lines.append("")
    lines.append(
        "Online bytes and rounds are party 0's ledger (each opened element counted sent and received); offline "
        "bytes are party 0's traffic with the dealer service, which crosses the dealer's and party 0's links.\n"
    )


def _latency(lines: list[str], latency: dict[str, Any], runs: dict[str, Any]) -> None:
    wan = latency.get("wan")
    if wan is None:
        return
    lines.append(
        f"Where the round trips go on the WAN profile (measured RTT {wan['rtt_s'] * 1000:.1f} ms): a step is "
        "latency-bound when its online rounds × RTT is at least half its wall time there.\n"
    )
    table(
        lines,
        (
            "step",
            "calls",
            "online rounds (per call)",
            "rounds × RTT, s",
            "wall on WAN, s",
            "wall on one host, s",
            "latency-bound",
        ),
    )
    calls = {k: max(1, int(c.get("calls", 1))) for k, c in runs["wan"]["steps"].items()}
    steps = sorted(wan["steps"].items(), key=lambda kv: -kv[1]["rounds_x_rtt_s"])
    for step, s in steps:
        lines.append(
            f"| {step} | {calls[step]} | {s['online_rounds']:,} ({s['online_rounds'] / calls[step]:.0f}) | "
            f"{s['rounds_x_rtt_s']:.2f} | {s['seconds']:.2f} | "
            f"{s['loopback_seconds']:.2f} | {'yes' if s['latency_bound'] else 'no'} |"
        )
    floor = sum(s["rounds_x_rtt_s"] for s in wan["steps"].values())
    bound = [k for k, s in steps if s["latency_bound"]]
    lines.append(
        f"\nThe job's {runs['wan']['online_rounds']:,} online rounds cost at least {floor:.1f} s of its "
        f"{runs['wan']['wall_s']:.1f} s on this link whatever the bandwidth. Latency-bound steps: "
        f"{', '.join(bound) if bound else 'none'}. The protocols already send all independent openings of one stage "
        "as one message (a sort's comparators of a stage, every remaining client's values in a UE round), so the "
        "rounds per call are each computation's depth and do not grow with the number of clients. What batching "
        "can still remove is the depth between openings that do not depend on each other within a call (merged, "
        "they cost one RTT instead of several); the bytes stay the same. RS's depth is constant up to 128 stored "
        "rounds (SecTop ranks every pair of rounds in one comparison call; a sorting network's depth grows as "
        "O(log² T)), UE's is fixed per unlearning round, and unlearning rounds run one after another.\n"
    )


def _plot(res: dict[str, Any], quick: bool) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    runs = res["figures"]["profiles"]
    names = [n for n in ("loopback", "lan", "wan") if n in runs]
    steps = sorted({s for n in names for s in runs[n]["steps"]})
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.6))
    x = np.arange(len(steps))
    width = 0.8 / len(names)
    for i, n in enumerate(names):
        secs = [runs[n]["steps"].get(s, {}).get("seconds", 0.0) for s in steps]
        ax.bar(x + i * width, secs, width, label=LABELS[n])
    wan = res["figures"]["latency"].get("wan")
    if wan is not None:
        floor = [wan["steps"].get(s, {}).get("rounds_x_rtt_s", 0.0) for s in steps]
        ax.scatter(x + (len(names) - 1) * width, floor, marker="_", s=300, color="k", label="WAN rounds × RTT")
    ax.set_xticks(x + width * (len(names) - 1) / 2, steps, rotation=30, ha="right")
    ax.set_ylabel("seconds (party 0's ledger)")
    ax.set_title("time per step")
    ax.legend(fontsize=7)
    bx.bar([SHORT[n] for n in names], [runs[n]["wall_s"] for n in names], color=["C0", "C1", "C2"][: len(names)])
    bx.set_ylabel("seconds")
    bx.set_title("whole job, admin-observed")
    return save_figure(fig, "multihost", res, quick, bottom=0.3)
