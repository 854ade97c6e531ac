"""What the encrypted MPC plane costs: the per-step benchmark on three transports.

Three local clusters (`mpc.cluster.TwoPartyCluster`: the dealer service and two party
processes on loopback, one torch thread each) differ only in how the bytes travel:

* `gloo` — party↔party over torch.distributed/gloo, CrypTen's own communicator: the
  plaintext plane this project used before (dealer link without TLS);
* `tcp` — the MPC plane's two-lane channel without TLS;
* `tls` — the deployed plane: TLS 1.3 with mutual certificate authentication everywhere.

Every operation of `bench.mpc_primitives`' plan runs on the three clusters one after the
other, `REPEATS` times, rotating which transport goes first (a shared machine's load
drifts); the JSON keeps every repeat, the median wall seconds, the CPU seconds
(user + sys) of party 0, party 1 and the dealer, and the bytes and rounds (the same on
every transport — checked). Two probes measure the transports themselves: latency (a
1-element all-reduce) and throughput (an all-reduce of 2^23 int64 each way). Goal:
Σ median wall(tls) ≤ 1.3 × Σ median wall(gloo).

`python -m bench.mpc_plane [--quick]` or `python -m bench mpc_plane`.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch

from bench.env import process_cpu_seconds, stamp, write_result
from bench.mpc_primitives import measure, plan
from mpc.cluster import ClusterConfig, TwoPartyCluster

TRANSPORTS = ("gloo", "tcp", "tls")
REPEATS = 3
GOAL_RATIO = 1.3
LATENCY_CALLS = 200
THROUGHPUT_ELEMENTS = 1 << 23


def probe(backend: Any, rank: int, calls: int, elements: int) -> dict[str, float]:
    """Party side: round-trip latency and all-reduce throughput of the session's communicator."""
    from mpc.session import active_communicator

    c = active_communicator()
    one = torch.zeros(1, dtype=torch.long)
    for _ in range(10):
        c.all_reduce(one)
    start = time.perf_counter()
    for _ in range(calls):
        c.all_reduce(one)
    latency = (time.perf_counter() - start) / calls
    big = torch.randint(-(2**62), 2**62, (elements,))
    c.all_reduce(big)
    start = time.perf_counter()
    for _ in range(3):
        c.all_reduce(big)
    seconds = (time.perf_counter() - start) / 3
    return {"round_trip_s": latency, "all_reduce_s": seconds, "bytes_per_s_each_way": elements * 8 / seconds}


def _cpu(cluster: TwoPartyCluster) -> list[float]:
    return [process_cpu_seconds(cluster.pids[n]) for n in ("party0", "party1", "dealer")]


def _one(cluster: TwoPartyCluster, op: str, size: Any, seed: int) -> dict[str, Any]:
    before = _cpu(cluster)
    r0, r1 = cluster.run(measure, op, size, seed)
    after = _cpu(cluster)
    return {
        "seconds": r0["seconds"],
        "cpu_seconds_party0_party1_dealer": [a - b for a, b in zip(after, before, strict=True)],
        "online_bytes": r0["online_bytes"],
        "online_rounds": r0["online_rounds"],
        "offline_bytes": r0["offline_bytes"],
        "offline_seconds": r0["offline_seconds"],
    }


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "median_seconds": statistics.median(r["seconds"] for r in runs),
        "seconds": [r["seconds"] for r in runs],
        "median_cpu_seconds_party0_party1_dealer": [
            statistics.median(r["cpu_seconds_party0_party1_dealer"][i] for r in runs) for i in range(3)
        ],
        **{k: runs[0][k] for k in ("online_bytes", "online_rounds", "offline_bytes")},
    }


def _measure_ops(clusters: dict[str, TwoPartyCluster], quick: bool) -> list[dict[str, Any]]:
    rows = []
    for seed, (op, size) in enumerate(plan(quick)):
        runs: dict[str, list[dict[str, Any]]] = {t: [] for t in TRANSPORTS}
        for rep in range(REPEATS):
            order = TRANSPORTS[rep % 3 :] + TRANSPORTS[: rep % 3]
            for transport in order:
                runs[transport].append(_one(clusters[transport], op, size, seed))
        per = {t: _summary(r) for t, r in runs.items()}
        same = {(p["online_bytes"], p["online_rounds"], p["offline_bytes"]) for p in per.values()}
        if len(same) != 1:
            raise RuntimeError(f"{op} {size}: the transports moved different amounts of data: {same}")
        rows.append({"op": op, "size": list(size) if isinstance(size, tuple) else size, "transports": per})
        print(
            f"  {op:<14} {str(size):<26}"
            + "".join(f"  {t} {per[t]['median_seconds']:7.3f} s" for t in TRANSPORTS)
            + f"   rounds {per['tls']['online_rounds']}",
            flush=True,
        )
    return rows


def _totals(rows: list[dict[str, Any]], probes: dict[str, Any]) -> dict[str, Any]:
    total = {t: sum(r["transports"][t]["median_seconds"] for r in rows) for t in TRANSPORTS}
    cpu = {t: sum(sum(r["transports"][t]["median_cpu_seconds_party0_party1_dealer"]) for r in rows) for t in TRANSPORTS}
    return {
        "sum_median_seconds": total,
        "sum_median_cpu_seconds": cpu,
        "ratio_tls_over_gloo": total["tls"] / total["gloo"],
        "ratio_tcp_over_gloo": total["tcp"] / total["gloo"],
        "ratio_tls_over_tcp": total["tls"] / total["tcp"],
        "goal_ratio": GOAL_RATIO,
        "goal_met": total["tls"] <= GOAL_RATIO * total["gloo"],
        "probes": probes,
    }


def run(quick: bool) -> dict[str, Any]:
    """Run every measurement; write bench/results/mpc_plane[_quick].json; return it."""
    meta = stamp(
        {
            "quick": quick,
            "repeats": REPEATS,
            "transports": list(TRANSPORTS),
            "torch_threads_per_process": 1,
            "processes": "per transport: dealer service + party0 + party1 on loopback (mpc.cluster.TwoPartyCluster)",
        }
    )
    clusters = {
        t: TwoPartyCluster(timeout=3600.0, config=ClusterConfig(session_timeout_s=600.0, transport=t))
        for t in TRANSPORTS
    }
    try:
        for c in clusters.values():
            c.start()
        probes = {}
        for t in TRANSPORTS:
            r0, _ = clusters[t].run(probe, LATENCY_CALLS, THROUGHPUT_ELEMENTS)
            probes[t] = r0
            print(
                f"  probe {t}: round trip {r0['round_trip_s'] * 1e6:.0f} µs, "
                f"{r0['bytes_per_s_each_way'] / 1e6:.0f} MB/s each way",
                flush=True,
            )
        rows = _measure_ops(clusters, quick)
    finally:
        for c in clusters.values():
            c.close()
    figures = {"rows": rows, "totals": _totals(rows, probes)}
    return write_result("mpc_plane_quick" if quick else "mpc_plane", meta, figures)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    result = run(parser.parse_args().quick)
    totals = result["figures"]["totals"]
    print({k: totals[k] for k in ("sum_median_seconds", "ratio_tls_over_gloo", "goal_met")})
