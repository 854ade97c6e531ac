"""One Stage II update-estimation round at the paper's size under 2PC (Starfish SecUE).

A dealer and two party processes (`mpc.cluster`) run, on a `SyntheticHistory` of the MNIST
CNN's size (m = 582,026, 20 clients, one target, 19 remaining, B = 2; costs do not depend
on the values):

* `pairs` — two L-BFGS pairs offered to every client through `add_pairs` (what warm-up and
  correction rounds do: curvature bits, normalisation, the new rows of YᵀY);
* `first` — the first SecUE round after the buffers changed (rebuilds every client's
  compact form: one SecMI batch) with every client's estimate, as a check round forms them,
  and the FedAvg reveal;
* `ahead` — an estimate round (`secue.estimate_update`: only the sum Σ_j ω_j ĝ^j, as a
  job's estimate round without DP forms it) that draws the next round's correlated
  randomness ahead (`Primitives.fixed_repeats`), as a job's estimate round followed by
  another does;
* `round` — the steady-state UE round (same buffers, new step v): the summed SecUE for the
  19 clients and the reveal of the update. This is "one UE round". Its fixed-operand
  product uses the pair drawn ahead during `ahead`, whose offline bytes it counts when it
  collects them;
* `rows` — the same steady round with every client's estimate (n·m) and the FedAvg reveal:
  what a check round (SecTC reads the rows) or a round under DP (rows clipped) costs.

Per step: wall seconds, offline (dealer) seconds and bytes, online (party↔party) bytes and
rounds, from party 0's ledger; each party's peak RSS; the machine load before and after.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import torch

from bench.env import peak_rss_bytes, stamp, write_result
from bench.histories import SyntheticHistory, seeded_share
from bench.paper import ARCHITECTURE
from bench.unlearning_cost import SESSION_TIMEOUT_S, model_size, summarize
from mpc.backend import Backend
from mpc.cluster import ClusterConfig, TwoPartyCluster

NAME = "ue_round"
CLIENTS, BUFFER = 20, 2
STEPS = ("pairs", "first", "ahead", "round", "rows")
#: --quick divides the model size by this (a smoke run)
QUICK_SCALE = 20


def code_revision() -> str:
    """The git commit the measured code comes from ("unknown" outside a checkout)."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=Path(__file__).parent,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except OSError:
        return "unknown"
    return out.stdout.strip() or "unknown"


def _direction(m: int, seed: int, scale: float) -> torch.Tensor:
    return scale * torch.randn(m, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def offer_pairs(backend: Backend, state: Any, hist: SyntheticHistory, remaining: list[str], params: Any) -> None:
    """B pairs offered to every client through `add_pairs`, as warm-up and corrections offer them
    (curvature check, ŷ fixed, YᵀY rows), in the ledger step "pairs"."""
    from unlearning.starfish.secue import add_pairs

    offers = []
    for k in range(params.buffer_size):  # the clients' answers (plaintext generation before the clock)
        s = _direction(hist.m, 10 + k, 1e-2)
        stored = hist.gradients(backend, k + 1, remaining)
        # y = exact − stored = (0.5 + j/n)·s + noise: positive curvature, like a smooth loss
        ys = torch.stack(
            [
                (0.5 + j / len(remaining)) * s + 1e-5 * _direction(hist.m, 100 * k + j, 1.0)
                for j in range(len(remaining))
            ]
        )
        offers.append((s, stored, backend.add(stored, seeded_share(backend, ys, "ue_round", k))))
    with backend.step("pairs"):
        for k, (s, stored, exact) in enumerate(offers):
            add_pairs(backend, state, remaining, k + 1, s, exact, stored, params)


def party_round(backend: Backend, rank: int, spec: dict[str, Any]) -> dict[str, Any]:
    """Offer B pairs, then two UE rounds; return this party's ledger and peak RSS."""
    from unlearning.fedavg import reveal_aggregate, reveal_update
    from unlearning.starfish.params import StarfishParams
    from unlearning.starfish.secue import estimate_gradients, estimate_update
    from unlearning.starfish.state import StarfishState

    hist = SyntheticHistory(spec["m"], CLIENTS, BUFFER + 4, seed=0)
    remaining = hist.ids[1:]
    params = StarfishParams(buffer_size=BUFFER)
    state = StarfishState(
        clients=tuple(remaining),
        selected=(),
        method="",
        deltas=backend.zeros((len(remaining),)),
        model=hist.model(1).to(torch.float64),
    )
    weights = [1.0 / len(remaining)] * len(remaining)
    offer_pairs(backend, state, hist, remaining, params)
    # (step, stored round, seed of v, per-client rows, whether the next step makes the same products)
    rounds = (
        ("first", BUFFER + 1, 20, True, False),
        ("ahead", BUFFER + 2, 21, False, True),
        ("round", BUFFER + 3, 22, False, False),
        ("rows", BUFFER + 4, 23, True, False),
    )
    for step, r, seed, rows, again in rounds:
        stored, norms = hist.gradients(backend, r, remaining), hist.norms(backend, r, remaining)
        v = _direction(hist.m, seed, 1e-3)
        with backend.step(step), backend.fixed_repeats(again):
            if rows:
                reveal_aggregate(
                    backend, estimate_gradients(backend, state, remaining, stored, v, params, norms), weights
                )
            else:
                reveal_update(backend, estimate_update(backend, state, remaining, stored, v, params, weights, norms))
    kept = sum(len(state.buffers.get(c, [])) for c in remaining)
    return {
        "ledger": backend.ledger.to_dict(),
        "pairs_kept": kept,
        "peak_rss_bytes": peak_rss_bytes(os.getpid()),  # VmHWM: this process since its exec
    }


def run(quick: bool = False) -> dict[str, Any]:
    m = model_size(ARCHITECTURE["mnist"]) // (QUICK_SCALE if quick else 1)
    meta = stamp(
        {"clients": CLIENTS, "remaining": CLIENTS - 1, "B": BUFFER, "m": m, "quick": quick, "code": code_revision()}
    )
    print(f"   mnist: m = {m:,}", flush=True)
    with TwoPartyCluster(timeout=3600.0, config=ClusterConfig(session_timeout_s=SESSION_TIMEOUT_S)) as cluster:
        start = time.perf_counter()
        r0, r1 = cluster.run(party_round, {"m": m})
        wall = time.perf_counter() - start
    steps = summarize(r0["ledger"])
    for step in STEPS:
        c = steps[step]
        print(
            f"     {step:6s} {c['wall_s']:7.2f} s  offline {c['offline_bytes'] / 1e6:8.1f} MB  "
            f"online {c['online_bytes'] / 1e6:8.1f} MB  rounds {c['online_rounds']}",
            flush=True,
        )
    figures = {
        "m": m,
        "steps": steps,
        "ue_round": steps["round"],
        "rows_round": steps["rows"],
        "pairs_kept": r0["pairs_kept"],
        "peak_rss_bytes": {"party0": r0["peak_rss_bytes"], "party1": r1["peak_rss_bytes"]},
        "call_wall_s": wall,
    }
    write_result(NAME + ("_quick" if quick else ""), meta, figures)
    return figures
