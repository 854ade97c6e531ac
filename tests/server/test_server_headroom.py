"""Numeric headroom of the Stage I aggregate: the sample budget B is exact, the aggregate of
uploads within B reconstructs exactly, one sample more can wrap, the membership keeps Σ n_j
within B, and running parties refuse the upload that would exceed it."""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from client_sdk import UploadRejectedError
from harness.local import LocalDeployment
from mpc.fixedpoint import decode, encode, reconstruct_encoded, share_encoded
from server import membership
from server.headroom import RING_MAX, coordinate_bound, fits, round_sample_budget, trim_to_budget


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 40), st.floats(1e-3, 2.0**22, allow_nan=False, allow_infinity=False))
def test_budget_is_the_largest_sample_total_that_cannot_wrap(precision, max_abs):
    bound, budget = coordinate_bound(precision, max_abs), round_sample_budget(precision, max_abs)
    assert bound >= max_abs * 2**precision
    assert budget * bound <= RING_MAX < (budget + 1) * bound
    assert fits(budget, precision, max_abs) and not fits(budget + 1, precision, max_abs)


def test_defaults_give_the_documented_budget():
    assert round_sample_budget(16, 2.0**20) == 2**27 - 1 == 134_217_727


def _aggregate(weights: list[int], value: float, precision: int) -> float:
    """Σ n_j·ḡ over secret shares (wrapping int64), reconstructed and decoded: one coordinate."""
    acc0 = acc1 = np.zeros(1, dtype=np.int64)
    for n in weights:
        s0, s1 = share_encoded(encode(np.array([value]), precision, abs(value)))
        with np.errstate(over="ignore"):
            acc0, acc1 = acc0 + np.int64(n) * s0, acc1 + np.int64(n) * s1
    return float(decode(reconstruct_encoded(acc0, acc1), precision)[0])


def test_aggregate_at_the_budget_is_exact_and_one_sample_more_wraps():
    precision, max_abs = 30, 2.0**20  # B = 8191: small enough to add up sample by sample
    budget = round_sample_budget(precision, max_abs)
    weights = [4000, 4000, budget - 8000]
    assert _aggregate(weights, max_abs, precision) == budget * max_abs
    assert _aggregate(weights, -max_abs, precision) == -budget * max_abs
    assert _aggregate([*weights, 1], max_abs, precision) < 0  # Σ n_j = B + 1: the sum wrapped


def test_a_billion_samples_at_the_documented_magnitude_cannot_fit():
    """n_j = 1e9 with |g| = 2e5 at f = 16 does not fit: such an upload must be refused."""
    assert not fits(10**9, 16, 2.0e5) and not fits(10**9, 16, 2.0**20)


@given(st.dictionaries(st.text("abc", min_size=1, max_size=3), st.integers(1, 100), max_size=8), st.integers(0, 400))
def test_trim_keeps_the_total_within_the_budget(members, budget):
    kept, removed = trim_to_budget(members, budget)
    assert sum(kept.values()) <= budget or not kept
    assert set(kept) | set(removed) == set(members) and not set(kept) & set(removed)
    if sum(members.values()) <= budget:
        assert removed == []


def test_membership_excludes_what_does_not_fit():
    held = {c: membership.Held(n, f"b{c}") for c, n in {"a": 60, "b": 50, "c": 10}.items()}
    members, excluded = membership.decide(held, dict(held), budget=100)
    assert members == {"b": 50, "c": 10} and excluded == {"a": membership.OVER_BUDGET}


@pytest.mark.timeout(300)
def test_parties_refuse_the_upload_that_would_exceed_the_round_budget(tmp_path):
    """f = 30, max_abs = 2^20: B = 8191. After a (5000), b (5000) is refused by both parties; c (3000)
    still fits; the round aggregates a and c exactly as plaintext FedAvg with the capped weights."""
    dep = LocalDeployment(
        tmp_path / "dep",
        clients=["a", "b", "c"],
        rounds={"deadline_s": 3.0, "poll_s": 0.05},
        limits={"max_samples": 5000},
        precision_bits=30,
        privacy={"min_cohort": 2},  # the round aggregates the two uploads that fit its budget
        # at f = 30 the input check's ring leaves ‖g‖ ≤ 0.25 (mpc.input_check.largest_norm); this test is
        # about the sample budget of N(0, 1) gradients, so it runs without the check
        validation={"enabled": False},
    )
    dep.start()
    try:
        with dep.admin() as admin:
            admin.start_training("toy", np.zeros(8, dtype=np.float32), 0.5)
        grads = {c: np.random.default_rng(k).normal(size=8) for k, c in enumerate("abc")}
        sdks = {c: dep.client(c) for c in "abc"}
        for sdk in sdks.values():
            sdk.register()
        sdks["a"].wait_for_round(0, timeout_s=90)
        sdks["a"].submit(1, grads["a"], 5000)
        with pytest.raises(UploadRejectedError, match="exceed the round's sample budget 8191"):
            sdks["b"].submit(1, grads["b"], 5000)
        sdks["c"].submit(1, grads["c"], 3000)
        with dep.admin() as admin:
            end = time.time() + 120
            while admin.status().latest_committed < 1 and time.time() < end:
                time.sleep(0.05)
            status = admin.status()
        assert {m.client_id: m.n_samples for m in status.rounds[0].members} == {"a": 5000, "c": 3000}
        # k = 2: no principal above half of the round's weight, so a's 5000 is capped at 3000
        expected = -0.5 * (3000 * grads["a"] + 3000 * grads["c"]) / 6000
        assert np.allclose(sdks["a"].fetch_model(1).params, expected, atol=1e-6)
        for sdk in sdks.values():
            sdk.close()
    finally:
        dep.stop()
