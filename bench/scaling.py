"""Scaling curves of an unlearning job's 2PC cost in the model size m, the clients n and the
stored rounds T.

One axis varies, the others stay at the base point (the paper's m = 582,026, n = 20, T = 20):

* m ∈ {50,890; 200,000; 582,026; 2,000,000} at n = 20, T = 20;
* n ∈ {10, 20, 50, 100} at m = 200,000 (capped so the axis fits the run's time budget:
  SecTC at n = 100 and m = 582,026 alone would take about as long as the whole m axis), T = 20;
* T ∈ {10, 20, 50, 100} at m = 582,026, n = 20 — only TD and RS depend on T, so only they run.

Every grid point runs in a fresh `TwoPartyCluster` (a dealer and two party processes; peak RSS
cannot be reset, so each point gets new processes) the real Starfish steps on a
`SyntheticHistory` (Gaussian uploads; costs do not depend on the values), one target and
n − 1 remaining clients, Starfish's default parameters:

* setup — one two-element SecMax first, so the session's first comparison (connections to the
  peer and the dealer) is charged to no step;
* TD — [δ^j] = SecMax over T rounds for the n − 1 clients (Algorithm 4 step 1);
* RS — SecRS choosing ⌈0.6·T⌉ rounds (`RS_SIGMA`, the demo's σ) with the comparison the
  defaults use at that T (Method 1 iff T ≤ T_δ = 64); at the defaults' σ = 1 every stored
  round is replayed, the set is public and SecTop compares nothing;
* UE-first — the first SecUE round after the buffers changed (every client's compact form
  rebuilt: one SecMI batch) with the FedAvg reveal, B = 2 pairs per client;
* UE — the steady SecUE round (same buffers, a new step v) with the FedAvg reveal;
* TC — SecTC (Algorithm 3) on all (n − 1)·m coordinates; TC-sample — 4,096 public
  coordinates per client first (docs/ALGORITHM.md §4).

Per step: wall s, offline/online s and bytes (party 0's ledger), each party's peak RSS
(VmHWM of the process after its steps, which includes the plaintext history it
generated; not ru_maxrss, which a spawned process inherits from the benchmark's own peak);
the same steps on `PlainBackend` in this process (wall s). `bench.scaling_model`
turns the points into fits and the whole-job composite.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any

import torch

from bench.env import peak_rss_bytes, stamp, write_result
from bench.histories import SyntheticHistory
from bench.scaling_model import composite, fits, predicted_rss, rss_fit
from bench.ue_round import offer_pairs
from bench.unlearning_cost import SAMPLE_SIZE, SESSION_TIMEOUT_S, summarize
from mpc.backend import Backend
from mpc.cluster import ClusterConfig, TwoPartyCluster

NAME = "scaling"
#: (axis, values, the point's other coordinates, whether UE and TC run)
GRID: tuple[tuple[str, tuple[int, ...], dict[str, int], bool], ...] = (
    ("m", (50_890, 200_000, 582_026, 2_000_000), {"n": 20, "T": 20}, True),
    ("n", (10, 20, 50, 100), {"m": 200_000, "T": 20}, True),
    ("T", (10, 20, 50, 100), {"m": 582_026, "n": 20}, False),
)
QUICK_GRID: tuple[tuple[str, tuple[int, ...], dict[str, int], bool], ...] = (
    ("m", (2_000, 8_000), {"n": 4, "T": 6}, True),
    ("n", (4, 8), {"m": 2_000, "T": 6}, True),
    ("T", (6, 12), {"m": 2_000, "n": 4}, False),
)
STEPS = ("TD", "RS", "UE-first", "UE", "TC", "TC-sample")
RS_SIGMA = 0.6
"""The share of the stored rounds RS chooses at every point (σ = 1 would choose all, at no cost)."""


def points(grid: tuple[tuple[str, tuple[int, ...], dict[str, int], bool], ...]) -> list[dict[str, Any]]:
    """The distinct grid points, each with the axes it lies on; a point measured with UE and TC
    also serves an axis that needs only TD and RS."""
    out: dict[tuple[int, int, int], dict[str, Any]] = {}
    for axis, values, others, ue in grid:
        for value in values:
            p = {**others, axis: value}
            key = (p["m"], p["n"], p["T"])
            point = out.setdefault(key, {"m": p["m"], "n": p["n"], "T": p["T"], "ue": ue, "axes": []})
            point["ue"] = point["ue"] or ue
            point["axes"].append(axis)
    return list(out.values())


def party_scaling(backend: Backend, rank: int, spec: dict[str, Any]) -> dict[str, Any]:
    """TD and RS on a T-round history, then (spec["ue"]) UE-first, UE, TC and TC-sample;
    this party's ledger and peak RSS."""
    from unlearning.starfish.params import StarfishParams
    from unlearning.starfish.secrs import select_rounds
    from unlearning.starfish.thresholds import determine_thresholds

    hist = SyntheticHistory(spec["m"], spec["n"], spec["T"], seed=0)
    target, remaining = hist.ids[0], hist.ids[1:]
    params = StarfishParams()
    total = hist.num_rounds
    for i in range(1, total + 1):  # the target's uploads: plaintext generation before the clock
        hist.norms(backend, i, [target])
    with backend.step("setup"):  # the session's first comparison (connections, dealer) is no step's cost
        backend.reveal(backend.max(backend.share(torch.zeros(2, 1, dtype=torch.float64)), dim=0))
    with backend.step("TD"):
        deltas = determine_thresholds(backend, hist, remaining)
    with backend.step("RS"):
        select_rounds(backend, hist, [target], math.ceil(RS_SIGMA * total), params.comparison(total), alt=False)
    if spec["ue"]:
        _estimate_and_check(backend, hist, remaining, deltas, params)
    return {
        "ledger": backend.ledger.to_dict(),
        "peak_rss_bytes": peak_rss_bytes(os.getpid()),  # VmHWM: this process since its exec
    }


def _estimate_and_check(
    backend: Backend, hist: SyntheticHistory, remaining: list[str], deltas: Any, params: Any
) -> None:
    """Two SecUE rounds with the FedAvg reveal (the first rebuilds the compact forms), then SecTC
    on the steady round's estimates, full and sample-first."""
    from unlearning.fedavg import reveal_aggregate
    from unlearning.starfish.correction import check_sample, flags_for
    from unlearning.starfish.secue import estimate_gradients
    from unlearning.starfish.state import StarfishState

    r = hist.num_rounds // 2
    state = StarfishState(
        clients=tuple(remaining), selected=(), method="", deltas=deltas, model=hist.model(r).to(torch.float64)
    )
    offer_pairs(backend, state, hist, remaining, params)  # as a job offers them: ŷ fixed, YᵀY rows
    stored, norms = hist.gradients(backend, r, remaining), hist.norms(backend, r, remaining)
    weights = [1.0 / len(remaining)] * len(remaining)
    estimates = None
    for step, seed in (("UE-first", 7), ("UE", 8)):
        v = 1e-3 * torch.randn(hist.m, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
        with backend.step(step):
            estimates = estimate_gradients(backend, state, remaining, stored, v, params, norms)
            reveal_aggregate(backend, estimates, weights)
    with backend.step("TC"):
        flags_for(backend, state, remaining, estimates, None)
    with backend.step("TC-sample"):
        flags_for(backend, state, remaining, estimates, check_sample(hist.m, SAMPLE_SIZE, r))


def measure_point(point: dict[str, Any]) -> dict[str, Any]:
    """One grid point: a fresh cluster for the 2PC run (peak RSS per party), then the plaintext run."""
    from mpc.plain_backend import PlainBackend

    spec = {k: point[k] for k in ("m", "n", "T", "ue")}
    with TwoPartyCluster(timeout=3600.0, config=ClusterConfig(session_timeout_s=SESSION_TIMEOUT_S)) as cluster:
        start = time.perf_counter()
        r0, r1 = cluster.run(party_scaling, spec)
        wall = time.perf_counter() - start
    plain = party_scaling(PlainBackend(), 0, spec)
    return {
        **point,
        "steps": summarize(r0["ledger"]),
        "plain_wall_s": {step: c["seconds"] for step, c in plain["ledger"].items()},
        "peak_rss_bytes": {"party0": r0["peak_rss_bytes"], "party1": r1["peak_rss_bytes"]},
        "call_wall_s": wall,
    }


def available_memory_bytes() -> int:
    """MemAvailable of this machine (Linux /proc/meminfo), 0 when unknown."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def memory_refusal(point: dict[str, Any], measured: list[dict[str, Any]], available: int) -> str:
    """Why a point is skipped: its two party processes, as the peak RSS fitted on the points
    measured so far predicts, would take more than 90 % of the available memory ("" to run it)."""
    if not point["ue"]:
        return ""
    per_party = predicted_rss(measured, point)
    if per_party is None or available <= 0 or 2 * per_party <= 0.9 * available:
        return ""
    return (
        f"two parties would need about {2 * per_party / 2**30:.1f} GiB (peak RSS fitted to (n−1)·m), "
        f"{available / 2**30:.1f} GiB available"
    )


def run(quick: bool = False) -> dict[str, Any]:
    grid = QUICK_GRID if quick else GRID
    meta = stamp(
        {
            "grid": {axis: {"values": list(values), "fixed": others, "ue_tc": ue} for axis, values, others, ue in grid},
            "B": 2,
            "sample": SAMPLE_SIZE,
            "quick": quick,
            "history": "synthetic Gaussian uploads, seeded benchmark shares; Starfish's default parameters",
        }
    )
    measured: list[dict[str, Any]] = []
    skipped = []
    for point in points(grid):
        reason = memory_refusal(point, measured, available_memory_bytes())
        if reason:
            print(f"   m {point['m']:,} n {point['n']} T {point['T']}: skipped, {reason}", flush=True)
            skipped.append({**point, "reason": reason})
            continue
        result = measure_point(point)
        line = "  ".join(f"{s} {c['wall_s']:.2f} s" for s, c in result["steps"].items())
        print(f"   m {point['m']:,} n {point['n']} T {point['T']}: {line}", flush=True)
        measured.append(result)
    figures = {
        "points": measured,
        "skipped": skipped,
        "fits": fits(measured),
        "rss_fit": rss_fit(measured),
        "composite": composite(measured),
    }
    write_result(NAME + ("_quick" if quick else ""), meta, figures)
    return figures
