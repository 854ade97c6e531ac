"""A check round's estimates formed only where SecTC compares them (unlearning/starfish/sample_first.py).

On both backends the sample-first flags are those of `Backend.threshold_flags` on the full
rows with the same sample, and the update is the weighted sum of the rows with each
published answer in place of its estimate. Under 2PC the dealer sends m ring elements per
client the sample left unflagged and per group of the summed update (plus the sample's
product), where the full rows cost m per client holding pairs.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_secue import CLIENTS, STEP_LENGTHS, M, PairState, fill, uneven_buffers

from mpc.backend import Backend
from mpc.cluster import TwoPartyCluster
from mpc.plain_backend import PlainBackend
from unlearning.fedavg import weighted_sum
from unlearning.starfish.correction import replace_rows
from unlearning.starfish.params import StarfishParams
from unlearning.starfish.sample_first import kept_update, sample_first_flags
from unlearning.starfish.secue import add_pairs, estimate_gradients, round_terms

NAMES = [f"c{j}" for j in range(CLIENTS + 1)]  #: c3 holds no pair


def check_round(
    backend: Backend,
    store: PairState,
    params: StarfishParams,
    m: int,
    thresholds: list[float],
    sample: torch.Tensor,
    answering: set[str],
    seed: int,
) -> dict[str, Any]:
    """One check round both ways on the same buffers: full rows then `threshold_flags`, and
    `sample_first_flags` then `kept_update`; the flagged clients in `answering` publish an
    exact answer. Flags, revealed updates and each way's UE offline bytes."""
    gen = torch.Generator().manual_seed(seed + 1)
    plain_g = torch.randn(len(NAMES), m, generator=gen, dtype=torch.float64) * 0.1
    g = backend.share(plain_g, src=0)
    norms = backend.share(plain_g.norm(dim=1), src=0)  # the reported norms a job passes
    v = torch.randn(m, generator=gen, dtype=torch.float64) * 0.2
    exact = {c: backend.share(torch.randn(m, generator=gen, dtype=torch.float64) * 0.1, src=0) for c in NAMES}
    weights = [0.05, 0.3, 0.02, 0.1]
    deltas = backend.share(torch.tensor(thresholds, dtype=torch.float64), src=0)
    estimate_gradients(backend, store, NAMES, g, v, params, norms)  # builds the cached compact forms (SecMI)
    with backend.own_ledger() as full_costs:
        with backend.step("UE"):
            rows = estimate_gradients(backend, store, NAMES, g, v, params, norms)
        with backend.step("TC"):
            full_flags = [bool(f) for f in backend.threshold_flags(rows, deltas, sample).reshape(-1).tolist()]
    published = {c: exact[c] for c, f in zip(NAMES, full_flags, strict=True) if f and c in answering}
    expected = weighted_sum(backend, replace_rows(backend, rows, NAMES, published), weights)
    with backend.own_ledger() as costs:
        with backend.step("UE"):
            terms = round_terms(backend, store, NAMES, g, v, params, norms)
        flags = sample_first_flags(backend, terms, g, v, deltas, sample)
        with backend.step("UE"):
            update = kept_update(backend, terms, g, v, NAMES, weights, published)
    return {
        "flags": flags,
        "full_flags": full_flags,
        "update": backend.reveal(update),
        "expected": backend.reveal(expected),
        "offline": costs.to_dict()["UE"]["offline_bytes"],
        "full_offline": full_costs.to_dict()["UE"]["offline_bytes"],
    }


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    buffer=st.integers(1, 3),
    steps=st.integers(0, 3),
    takers=st.lists(st.booleans(), min_size=CLIENTS, max_size=CLIENTS),
    thresholds=st.lists(st.floats(0.0, 0.6), min_size=CLIENTS + 1, max_size=CLIENTS + 1),
    sample=st.sets(st.integers(0, M - 1), min_size=1, max_size=M),
    answering=st.sets(st.sampled_from(NAMES)),
    lengths=STEP_LENGTHS,
)
def test_sample_first_gives_the_full_rows_flags_and_update(
    seed: int,
    buffer: int,
    steps: int,
    takers: list[bool],
    thresholds: list[float],
    sample: set[int],
    answering: set[str],
    lengths: tuple[float, ...],
) -> None:
    """Whatever the buffers, thresholds, sample (the whole row included) and answers."""
    backend = PlainBackend()
    store = PairState()
    params = StarfishParams(buffer_size=buffer, hv_bound=1e6)
    fill(backend, store, params, steps, seed, lengths)
    uneven_buffers(backend, store, params, seed, takers)
    got = check_round(backend, store, params, M, thresholds, torch.tensor(sorted(sample)), answering, seed)
    assert got["flags"] == got["full_flags"]
    torch.testing.assert_close(got["update"], got["expected"])


BIG_M, SAMPLE = 16_384, 64
#: c0 and c1 exceed theirs on the sample, c2 nowhere (checked on every coordinate), c3 (no pair) too
THRESHOLDS = [1e-4, 1e-4, 50.0, 1e-4]


def big_round(backend: Backend, rank: int = 0) -> dict[str, Any]:
    """c0–c2 hold two pairs of m = 16,384, c3 none; c0, c1 and c3 answer."""
    params = StarfishParams(buffer_size=2, hv_bound=1e6)
    store = PairState()
    gen = torch.Generator().manual_seed(4)
    curvature = torch.rand(CLIENTS, BIG_M, generator=gen, dtype=torch.float64) + 0.5
    for t in (1, 2):
        s = torch.randn(BIG_M, generator=gen, dtype=torch.float64) * 0.05
        exact = backend.share(curvature * s, src=0)
        add_pairs(backend, store, NAMES[:CLIENTS], t, s, exact, backend.zeros((CLIENTS, BIG_M)), params)
    sample = torch.randperm(BIG_M, generator=gen)[:SAMPLE]
    return check_round(backend, store, params, BIG_M, THRESHOLDS, sample, {"c0", "c1", "c3"}, seed=4)


@pytest.fixture(scope="module")
def cluster():
    with TwoPartyCluster(timeout=120) as running:
        yield running


@pytest.mark.timeout(180)
def test_under_2pc_the_flags_and_update_match_and_the_dealer_sends_less(cluster: TwoPartyCluster) -> None:
    plain = big_round(PlainBackend())
    assert plain["flags"] == plain["full_flags"] == [True, True, False, True]
    torch.testing.assert_close(plain["update"], plain["expected"])
    got, other = cluster.run(big_round)
    assert got["flags"] == other["flags"] == got["full_flags"] == plain["flags"]
    assert torch.equal(got["update"], other["update"])
    gap = float((got["update"] - plain["expected"]).norm() / plain["expected"].norm())
    assert gap <= 1e-3, gap
    # full rows: an m-sized pair per client holding pairs (c0–c2); sample first: c2's whole row
    # (the sample left it unflagged), the sum over the clients keeping their estimate (c2: one
    # m-sized pair) and the sample's product (n·|S| scale, far below n·k·|S|)
    assert got["full_offline"] >= 8 * 3 * BIG_M, got["full_offline"]
    assert got["offline"] <= 8 * (2 * BIG_M + CLIENTS * 2 * SAMPLE), got["offline"]
