"""Per-step 2PC cost of one Starfish unlearning round (the analogue of Tables I and VII).

For the paper's three model sizes (MNIST CNN 582,026 parameters, F-MNIST 844,682,
CIFAR-10 878,538), 20 clients (one target, 19 remaining) and T = 40 stored rounds, a dealer
and two party processes (`mpc.cluster`) run the real Starfish steps of
`unlearning.starfish` on a `SyntheticHistory` (Gaussian uploads of that size; costs do not
depend on the values):

* TD  — threshold determination, [δ^j] = SecMax over 40 rounds for 19 clients;
* RS1 — round selection, Method 1 (bitonic sort with SecGE2, no division);
* RS2 — round selection, Method 2 (SecDiv then bitonic sort with SecGE);
* UE  — update estimation for 19 clients with B = 2 L-BFGS pairs each (compact form,
        SecMI, safeguards) and the FedAvg reveal;
* TC  — threshold checking, Algorithm 3 on all 19 × m coordinates;
* TC-sample — the same flags, public random sample of coordinates first (docs/ALGORITHM.md §4).

Per step: wall seconds, offline seconds (time spent fetching correlated randomness from
the dealer), online seconds (the rest), offline bytes (dealer → party 0; party 1 expands a
seed) and online bytes (party 0's communicator counters: party↔party traffic), rounds.
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch

from bench.env import stamp, write_result
from bench.histories import SyntheticHistory, seeded_share
from bench.paper import ARCHITECTURE, PER_STEP
from mpc.backend import Backend
from mpc.cluster import ClusterConfig, TwoPartyCluster

NAME = "unlearning_cost"
CLIENTS, ROUNDS, SIGMA, BUFFER = 20, 40, 0.6, 2
#: coordinates per client checked first by TC-sample (its flags equal TC's)
SAMPLE_SIZE = 4096
STEPS = ("TD", "RS1", "RS2", "UE", "TC", "TC-sample")
SESSION_TIMEOUT_S = 600.0
#: --quick divides the model size by this (a smoke run; the tables come from the full run)
QUICK_SCALE = 10


def model_size(architecture: str) -> int:
    """m of one of the paper's CNNs."""
    from evaluation.models import build_model, num_parameters

    return num_parameters(build_model(architecture))


def fill_buffers(
    backend: Backend, state: Any, hist: SyntheticHistory, clients: list[str], pairs: int, seed: int
) -> None:
    """Give each client `pairs` accepted L-BFGS pairs (ŝ public unit vectors, ŷ = c·ŝ + noise shared)."""
    from unlearning.starfish.state import CurvaturePair

    gen = torch.Generator().manual_seed(seed)
    for k in range(pairs):
        s = torch.randn(hist.m, generator=gen, dtype=torch.float64)
        s = s / torch.linalg.vector_norm(s)
        ys = torch.stack(
            [
                (0.5 + j / len(clients)) * s + 1e-4 * torch.randn(hist.m, generator=gen, dtype=torch.float64)
                for j in range(len(clients))
            ]
        )
        y = seeded_share(backend, ys, seed, "y", k)
        for j, c in enumerate(clients):
            state.buffers.setdefault(c, []).append(CurvaturePair(round=k + 1, s=s, y=backend.index(y, j)))


def party_costs(backend: Backend, rank: int, spec: dict[str, Any]) -> dict[str, Any]:
    """Run the requested Starfish steps once on a synthetic history; return this party's ledger."""
    from unlearning.fedavg import reveal_aggregate
    from unlearning.starfish.correction import check_sample, flags_for
    from unlearning.starfish.params import StarfishParams
    from unlearning.starfish.secrs import select_rounds
    from unlearning.starfish.secue import estimate_gradients
    from unlearning.starfish.state import StarfishState
    from unlearning.starfish.thresholds import determine_thresholds

    steps = spec["steps"]
    hist = SyntheticHistory(
        spec["m"], spec.get("clients", CLIENTS), spec.get("rounds", ROUNDS), seed=spec.get("seed", 0)
    )
    target, remaining = hist.ids[0], hist.ids[1:]
    count = math.ceil(spec.get("sigma", SIGMA) * hist.num_rounds)
    params = StarfishParams(buffer_size=spec.get("B", BUFFER))
    # the history's plaintext is generated before the clock starts (clients' uploads, not 2PC)
    for i in range(1, hist.num_rounds + 1):
        hist.norms(backend, i, [target])
    with backend.step("TD"):
        deltas = determine_thresholds(backend, hist, remaining)
    if "RS1" in steps:
        with backend.step("RS1"):
            select_rounds(backend, hist, [target], count, "method1", alt=False)
    if "RS2" in steps:
        with backend.step("RS2"):
            select_rounds(backend, hist, [target], count, "method2", alt=False)
    if not {"UE", "TC", "TC-sample"} & set(steps):
        return {"ledger": backend.ledger.to_dict(), "flags": {}}
    state = StarfishState(
        clients=tuple(remaining), selected=(), method="", deltas=deltas, model=hist.model(ROUNDS // 2).to(torch.float64)
    )
    fill_buffers(backend, state, hist, remaining, params.buffer_size, spec.get("seed", 0))
    r = hist.num_rounds // 2
    stored = hist.gradients(backend, r, remaining)
    norms = hist.norms(backend, r, remaining)
    v = 1e-3 * torch.randn(hist.m, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    with backend.step("UE"):
        estimates = estimate_gradients(backend, state, remaining, stored, v, params, norms)
        reveal_aggregate(backend, estimates, [1.0 / len(remaining)] * len(remaining))
    flags: dict[str, list[bool]] = {}
    if "TC" in steps:
        with backend.step("TC"):
            flags["TC"] = flags_for(backend, state, remaining, estimates, None)
    if "TC-sample" in steps:
        with backend.step("TC-sample"):
            flags["TC-sample"] = flags_for(
                backend, state, remaining, estimates, check_sample(hist.m, spec.get("sample", SAMPLE_SIZE), r)
            )
    return {"ledger": backend.ledger.to_dict(), "flags": flags}


def summarize(ledger: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """Per step: wall/offline/online seconds, offline/online bytes (party 0's view), rounds."""
    out = {}
    for name, c in ledger.items():
        out[name] = {
            "wall_s": c["seconds"],
            "offline_s": c["offline_seconds"],
            "online_s": c["seconds"] - c["offline_seconds"],
            "offline_bytes": c["offline_bytes"],
            "online_bytes": c["online_bytes"],
            "online_rounds": c["online_rounds"],
        }
    return out


def measure(spec: dict[str, Any], precision_bits: int | None = None) -> dict[str, Any]:
    """Start a dealer and two parties, run `party_costs(spec)`, return party 0's summary."""
    config = (
        ClusterConfig(session_timeout_s=SESSION_TIMEOUT_S)
        if precision_bits is None
        else ClusterConfig(precision_bits=precision_bits, session_timeout_s=SESSION_TIMEOUT_S)
    )
    with TwoPartyCluster(timeout=3600.0, config=config) as cluster:
        start = time.perf_counter()
        r0, r1 = cluster.run(party_costs, spec)
        wall = time.perf_counter() - start
    if r0["flags"] != r1["flags"]:
        raise RuntimeError("the parties revealed different flags")
    return {"steps": summarize(r0["ledger"]), "flags": r0["flags"], "call_wall_s": wall}


def run(quick: bool = False) -> dict[str, Any]:
    datasets = ["mnist"] if quick else ["mnist", "fmnist", "cifar10"]
    meta = stamp(
        {
            "clients": CLIENTS,
            "rounds": ROUNDS,
            "sigma": SIGMA,
            "B": BUFFER,
            "sample": SAMPLE_SIZE,
            "datasets": datasets,
            "quick": quick,
            "history": "synthetic Gaussian uploads, seeded benchmark shares",
        }
    )
    figures: dict[str, Any] = {}
    for ds in datasets:
        m = model_size(ARCHITECTURE[ds]) // (QUICK_SCALE if quick else 1)
        print(f"   {ds}: m = {m:,}", flush=True)
        result = measure({"m": m, "steps": list(STEPS)})
        result["m"] = m
        result["paper"] = {
            step: dict(zip(("offline_s", "online_s", "offline_gb", "online_gb"), PER_STEP[key][ds], strict=True))
            for step, key in (("TD", "TD"), ("RS1", "RS1"), ("RS2", "RS2"), ("UE", "UE"), ("TC", "TC"))
        }
        for step, c in result["steps"].items():
            print(
                f"     {step:9s} {c['wall_s']:8.2f} s  offline {c['offline_bytes'] / 1e9:7.3f} GB  "
                f"online {c['online_bytes'] / 1e9:7.3f} GB",
                flush=True,
            )
        figures[ds] = result
    write_result(NAME + ("_quick" if quick else ""), meta, figures)
    return figures
