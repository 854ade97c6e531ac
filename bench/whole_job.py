"""A whole Starfish unlearning job at the paper's MNIST setting, 2PC beside plaintext
(the analogue of Table II).

Setting: 20 clients (one backdoored target), T = 40 stored rounds of FedAvg on real MNIST
(the 5k subset) with the paper's CNN (582,026 parameters), σ 0.6, α 0.4, β 0.1, B 2.
The history is trained once (`bench.histories.cached_simulation`) and then unlearned

* under 2PC: a dealer and two party processes (`mpc.cluster.TwoPartyCluster`), each party
  holding seeded benchmark shares of the stored uploads (`bench.histories.SeededHistory`)
  and running `StarfishStrategy` on `CrypTenBackend`; warm-up and correction requests are
  answered by local training in party 0 (`SeededOracle`, the clients' work, timed apart);
* in plaintext: the same strategy on `PlainBackend` in this process.

Reported: wall time of each run, the client-compute part, per-step time and bytes
(offline = dealer → party 0, online = party 0 ↔ party 1), the 2PC/plaintext ratio, the
unlearned models' TER and BA-ASR, their distance, and whether both runs selected the same
rounds and raised the same flags. Beside them: the paper's Table II (ABY, LAN).
"""

from __future__ import annotations

import cProfile
import pstats
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from bench.env import single_thread, stamp, write_result
from bench.histories import SeededOracle, cached_simulation, seeded_history
from bench.paper import WHOLE_JOB_LAN
from mpc.backend import Backend
from mpc.cluster import ClusterConfig, TwoPartyCluster

NAME = "whole_job"
SESSION_TIMEOUT_S = 900.0
#: Starfish parameters of the job (paper §VI-A) and the SecTC sample-first pass (docs/ALGORITHM.md §4)
PROFILE_TOP = 20
JOB_PARAMS = {"sigma": 0.6, "alpha": 0.4, "beta": 0.1, "buffer_size": 2, "check_sample": 4096, "recovery_rounds": 0}


def simulation_config(quick: bool) -> Any:
    """The Stage I run whose history is unlearned.

    Full: paper CNN, 20 clients, 40 rounds on the 4,000 training images of 5k MNIST, 2 local
    epochs, η_l 0.05 — a history that learns (docs/QUALITY.md: TER 5.4 %, backdoor 88.9 %
    before unlearning), so late gradients shrink as they do in practice and the threshold
    checks see real magnitudes. Quick: 8×8 digits, small MLP.
    """
    from evaluation.simulator import SimulationConfig

    if quick:
        return SimulationConfig(dataset="digits", num_clients=20, rounds=40, seed=0)
    return SimulationConfig(dataset="mnist5k", local_epochs=2, seed=0)


def unlearn(
    backend: Backend, rank: int, config_dict: dict[str, Any], params: dict[str, Any], seed: int, profile: bool = False
) -> dict[str, Any]:
    """Run Starfish on the cached history with `backend` (one party, or plaintext with rank 0).

    With `profile`, party 0 runs under cProfile and returns its top functions by own time.
    """
    from evaluation.simulator import SimulationConfig
    from unlearning.starfish import StarfishStrategy
    from unlearning.strategy import UnlearnContext

    result = cached_simulation(SimulationConfig(**config_dict), log=False)
    history = seeded_history(result, seed)
    oracle = SeededOracle(result, rank, seed)
    ctx = UnlearnContext(backend=backend, history=history, oracle=oracle, targets=result.targets, params=params)  # type: ignore[attr-defined]
    profiler = cProfile.Profile() if profile and rank == 0 else None
    start = time.perf_counter()
    if profiler is not None:
        profiler.enable()
    outcome = StarfishStrategy().run(ctx)
    if profiler is not None:
        profiler.disable()
    wall = time.perf_counter() - start
    report = outcome.report
    return {
        "wall_s": wall,
        "client_s": oracle.client_seconds,
        "ledger": backend.ledger.to_dict(),
        "model": outcome.model.numpy() if rank == 0 else None,
        "selected": report["selection"]["selected_rounds"],
        "method": report["selection"]["method"],
        "flags": report["flags"],
        "arp_percent": report["arp_percent"],
        "warmup_rounds": report["warmup"]["rounds"],
        "curvature": report["curvature"],
        "revealed": report["revealed"],
        "profile": _top_functions(profiler) if profiler is not None else [],
    }


def _top_functions(profiler: cProfile.Profile, count: int = PROFILE_TOP) -> list[dict[str, Any]]:
    """The `count` functions with the most own time (seconds, calls, cumulative seconds)."""
    stats = pstats.Stats(profiler)
    rows = []
    for (filename, line, func), (_, calls, own, cumulative, _) in stats.stats.items():  # type: ignore[attr-defined]
        rows.append(
            {
                "function": f"{Path(filename).name}:{line}({func})",
                "own_s": own,
                "cumulative_s": cumulative,
                "calls": calls,
            }
        )
    return sorted(rows, key=lambda r: -r["own_s"])[:count]


def _totals(ledger: dict[str, dict[str, float]]) -> dict[str, float]:
    keys = ("seconds", "offline_seconds", "offline_bytes", "online_bytes", "online_rounds")
    return {k: sum(float(step[k]) for step in ledger.values()) for k in keys}


def run(quick: bool = False) -> dict[str, Any]:
    from evaluation.unlearning_metrics import Evaluator
    from mpc.plain_backend import PlainBackend

    config = simulation_config(quick)
    seed = 0
    meta = stamp(
        {
            "simulation": asdict(config),
            "starfish": JOB_PARAMS,
            "quick": quick,
            "path": "mpc.cluster.TwoPartyCluster (dealer + 2 party processes, loopback) on the stored history",
            "profiled": "party 0 under cProfile",
        }
    )
    result = cached_simulation(config)
    m = int(result.models[0].numel())  # type: ignore[attr-defined]
    cfg = result.config  # type: ignore[attr-defined]
    print(f"   history: {cfg.rounds} rounds, {cfg.num_clients} clients, m = {m:,}", flush=True)

    with single_thread():  # as each party process runs (mpc.session: one torch thread)
        plain = unlearn(PlainBackend(), 0, asdict(config), JOB_PARAMS, seed)
    print(f"   plaintext: {plain['wall_s']:.1f} s (clients {plain['client_s']:.1f} s)", flush=True)
    cluster_cfg = ClusterConfig(session_timeout_s=SESSION_TIMEOUT_S)
    with TwoPartyCluster(timeout=4 * 3600.0, config=cluster_cfg) as cluster:
        start = time.perf_counter()
        r0, r1 = cluster.run(unlearn, asdict(config), JOB_PARAMS, seed, True)
        call_wall = time.perf_counter() - start
    print(f"   2PC: {r0['wall_s']:.1f} s (clients {r0['client_s']:.1f} s)", flush=True)
    figures = _figures(result, Evaluator(result), m, (r0, r1), plain)  # type: ignore[arg-type]
    figures["secure"]["call_wall_s"] = call_wall
    write_result(NAME + ("_quick" if quick else ""), meta, figures)
    return figures


def _figures(result: Any, evaluator: Any, m: int, parties: tuple[dict, dict], plain: dict) -> dict[str, Any]:
    """The JSON figures: party 0's 2PC run beside the plaintext run and the paper's Table II."""
    from evaluation.unlearning_metrics import model_gap

    r0, r1 = parties
    secure_model = torch.from_numpy(r0["model"])
    plain_model = torch.from_numpy(plain["model"])
    totals = _totals(r0["ledger"])
    two_pc_s = r0["wall_s"] - r0["client_s"]
    plain_mpc_s = plain["wall_s"] - plain["client_s"]
    paper = dict(zip(("offline_s", "online_s", "offline_gb", "online_gb"), WHOLE_JOB_LAN["mnist"], strict=True))
    return {
        "m": m,
        "stored_rounds": result.config.rounds,
        "clients": result.config.num_clients,
        "secure": {
            "wall_s": r0["wall_s"],
            "client_s": r0["client_s"],
            "mpc_s": two_pc_s,
            "offline_s": totals["offline_seconds"],
            "online_s": totals["seconds"] - totals["offline_seconds"],
            "offline_bytes": totals["offline_bytes"],
            "online_bytes": totals["online_bytes"],
            "online_rounds": totals["online_rounds"],
            "steps": r0["ledger"],
            "party1_wall_s": r1["wall_s"],
            "metrics": evaluator.evaluate(secure_model),
            "arp_percent": r0["arp_percent"],
            "method": r0["method"],
            "revealed": r0["revealed"],
            "curvature": r0["curvature"],
            "profile_party0": r0["profile"],
        },
        "plain": {
            "wall_s": plain["wall_s"],
            "client_s": plain["client_s"],
            "algorithm_s": plain_mpc_s,
            "metrics": evaluator.evaluate(plain_model),
            "arp_percent": plain["arp_percent"],
        },
        "before": evaluator.evaluate(result.models[-1]),
        "agreement": {
            "same_selection": r0["selected"] == plain["selected"],
            "same_flags": r0["flags"] == plain["flags"],
            "same_selection_parties": r0["selected"] == r1["selected"],
            "model_gap": model_gap(secure_model, plain_model),
        },
        "ratio": {"wall": r0["wall_s"] / plain["wall_s"], "without_clients": two_pc_s / max(plain_mpc_s, 1e-9)},
        "paper": paper,
        "vs_paper": {
            "time": (totals["seconds"]) / (paper["offline_s"] + paper["online_s"]),
            "bytes": (totals["offline_bytes"] + totals["online_bytes"])
            / ((paper["offline_gb"] + paper["online_gb"]) * 1e9),
        },
        "targets": {"wall_s_max": 300.0, "traffic_gb_max": 50.0, "ratio_max": 20.0},
    }
