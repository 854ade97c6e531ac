"""The 2PC protocol sections of docs/RESULTS.md: each primitive's time, bytes and rounds
(`mpc_primitives`), and the same protocols on the three transports of the MPC plane (`mpc_plane`)."""

from __future__ import annotations

from typing import Any

from bench.report_format import fmt, ratio
from bench.report_section import Part, row, section, table

TRANSPORTS = ("gloo", "tcp", "tls")


def section_primitives(lines: list[str]) -> None:
    """Per-protocol time, bytes and rounds from bench/results/mpc_primitives.json (party 0's view)."""
    section(lines, "2PC protocols (primitives)", Part("mpc_primitives", _primitives))


def _primitives(lines: list[str], res: dict[str, Any], quick: bool) -> None:
    lines.append(
        "One call per row; online = party 0 ↔ party 1 (party 0's sent + received bytes), offline = dealer → party 0.\n"
    )
    table(
        lines,
        ("protocol", "size", "wall s", "online MB", "online rounds", "offline MB", "offline s"),
        (
            (
                r["op"],
                r["size"],
                fmt(r["seconds"]),
                fmt(r["online_bytes"] / 1e6, 1),
                r["online_rounds"],
                fmt(r["offline_bytes"] / 1e6, 1),
                fmt(r["offline_seconds"]),
            )
            for r in res["figures"]["rows"]
        ),
    )
    lines.append("")
    for name, target in res["figures"]["targets"].items():
        paper = f"; paper (ABY) {fmt(target['paper_aby_s'], 0)} s" if target.get("paper_aby_s") else ""
        lines.append(
            f"Target: {name} ≤ {fmt(target['target_s'], 0)} s — measured {fmt(target['measured_s'])} s: "
            f"{'yes' if target['met'] else 'no'}{paper}.\n"
        )


def section_plane(lines: list[str]) -> None:
    """The per-step benchmark on the three transports, from bench/results/mpc_plane.json."""
    section(lines, "What the encrypted MPC plane costs", Part("mpc_plane", _plane))


def _plane(lines: list[str], res: dict[str, Any], quick: bool) -> None:
    totals = res["figures"]["totals"]
    lines.append(
        "The same protocols on three transports (docs/DEPLOY.md §5): `gloo` = CrypTen's torch.distributed "
        "communicator (the plaintext plane used before), `tcp` = the MPC plane without TLS, `tls` = the deployed "
        f"plane. Median of {res['meta']['params']['repeats']} runs per transport; CPU = party 0 + party 1 + dealer, "
        "user + sys. Bytes and rounds are identical on the three.\n"
    )
    table(
        lines,
        ("protocol", "size", "rounds", "gloo s", "tcp s", "tls s", "tls ÷ gloo", "CPU s gloo / tcp / tls"),
        (_plane_row(r) for r in res["figures"]["rows"]),
    )
    wall, cpu = totals["sum_median_seconds"], totals["sum_median_cpu_seconds"]
    cpus = " / ".join(fmt(cpu[k]) for k in TRANSPORTS)
    lines.append(row(("**sum**", "", "", *(fmt(wall[k]) for k in TRANSPORTS), ratio(wall["tls"], wall["gloo"]), cpus)))
    lines.append("")
    probes = totals["probes"]
    lines.append(
        "Transport probes (party 0): round trip "
        + ", ".join(f"{k} {probes[k]['round_trip_s'] * 1e6:,.0f} µs" for k in TRANSPORTS)
        + "; all-reduce throughput each way "
        + ", ".join(f"{k} {probes[k]['bytes_per_s_each_way'] / 1e6:,.0f} MB/s" for k in TRANSPORTS)
        + ".\n"
    )
    lines.append(
        f"Goal: Σ wall(tls) ≤ {totals['goal_ratio']} × Σ wall(gloo) — measured {totals['ratio_tls_over_gloo']:.2f}×: "
        f"{'yes' if totals['goal_met'] else 'no'}.\n"
    )


def _plane_row(r: dict[str, Any]) -> tuple[Any, ...]:
    t = r["transports"]
    cpu = " / ".join(fmt(sum(t[k]["median_cpu_seconds_party0_party1_dealer"])) for k in TRANSPORTS)
    seconds = [fmt(t[k]["median_seconds"], 3) for k in TRANSPORTS]
    return (
        r["op"],
        r["size"],
        t["tls"]["online_rounds"],
        *seconds,
        ratio(t["tls"]["median_seconds"], t["gloo"]["median_seconds"]),
        cpu,
    )
