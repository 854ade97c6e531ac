"""The upload check (mpc.input_check) between two parties and the dealer's
`private_dot` kind: honest uploads accepted opening only zeros, every input beyond a check's
margin refused whatever its shares, the same verdicts as the cleartext rule — per item,
whether checked alone or in one vectorised batch with others."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from mpc.input_check import CheckBounds, HeldInput, largest_norm, plain_check

from helpers.input_check_pair import Pipe, Upload, honest, ring, run_batch, run_held, run_pair

F = 16
NORMS = (0.05, 1.0, 7.5, 40.0)
EXAMPLES = settings(max_examples=40, deadline=None)


@st.composite
def honest_uploads(draw) -> tuple[Upload, CheckBounds]:
    m = draw(st.integers(1, 300))
    norm_bound = min(draw(st.sampled_from(NORMS)), largest_norm(m, F))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    direction = rng.normal(size=m)
    g = direction / np.linalg.norm(direction) * norm_bound * draw(st.floats(0.0, 1.0))
    delta = float(np.abs(g).max()) * draw(st.floats(0.0, 1.0))
    return honest(g.astype(np.float32), F, delta), CheckBounds.make(m, F, norm_bound)


def outside(bits: int) -> st.SearchStrategy[int]:
    """Centred ring values v with v ∉ [−2^bits, 2^(bits+1)) (beyond a scalar window's margin)."""
    return st.one_of(st.integers(-(2**63), -(2**bits) - 1), st.integers(2 ** (bits + 1), 2**63 - 1))


@EXAMPLES
@given(honest_uploads())
def test_an_honest_upload_is_accepted_and_only_zeros_are_opened(case) -> None:
    upload, bounds = case
    pipe = Pipe()
    v0, v1, _ = run_pair(upload, bounds, pipe)
    assert v0.accepted and v1.accepted, (v0, v1)
    assert plain_check(upload.gradient, upload.norm, upload.delta, bounds).accepted
    (step0, z0), (step1, z1) = pipe.sent[0][-1], pipe.sent[1][-1]
    assert step0 == step1 == 2
    with np.errstate(over="ignore"):
        assert not (z0 + z1).any(), "an accepted upload opens exactly zero for every check"


@EXAMPLES
@given(honest_uploads(), st.data())
def test_a_coordinate_beyond_three_times_the_range_is_refused(case, data) -> None:
    upload, bounds = case
    b = bounds.bits
    i = data.draw(st.integers(0, bounds.num_params - 1))
    value = data.draw(st.one_of(st.integers(-(2**63), -3 * 2**b), st.integers(3 * 2**b, 2**63 - 1)))
    x = upload.gradient.copy()
    x[i] = value
    bad = Upload(x, upload.norm, upload.delta)
    v0, v1, _ = run_pair(bad, bounds)
    assert "range" in v0.failed and v0 == v1
    assert "range" in plain_check(x, bad.norm, bad.delta, bounds).failed


@EXAMPLES
@given(st.integers(4, 200), st.sampled_from(NORMS), st.integers(0, 2**32 - 1))
def test_a_norm_beyond_the_margin_is_refused(m, norm_bound, seed) -> None:
    bounds = CheckBounds.make(m, F, min(norm_bound, largest_norm(m, F)))
    rng = np.random.default_rng(seed)
    x = rng.integers(-(2**bounds.bits) + 1, 2**bounds.bits, size=m, dtype=np.int64)
    s = int((x.astype(object) ** 2).sum())
    t = bounds.norm_sq
    assume(s > t + 2 ** t.bit_length())
    bad = Upload(x, int(np.sqrt(s)), 0)
    v0, v1, _ = run_pair(bad, bounds)
    assert "norm" in v0.failed and v0 == v1
    assert "norm" in plain_check(x, bad.norm, bad.delta, bounds).failed


@EXAMPLES
@given(honest_uploads(), st.data())
def test_a_lie_about_the_norm_is_refused(case, data) -> None:
    upload, bounds = case
    b, tol = bounds.bits, bounds.tolerance
    s = int((upload.gradient.astype(object) ** 2).sum())
    lie = data.draw(st.one_of(outside(b), st.integers(0, 2 ** (b + 1) - 1)))
    assume(not -(2**b) <= lie < 2 ** (b + 1) or abs(lie * lie - s) > tol + 2 ** (2 * tol).bit_length())
    v0, v1, _ = run_pair(Upload(upload.gradient, lie, upload.delta), bounds)
    assert "reported_norm" in v0.failed and v0 == v1
    assert "reported_norm" in plain_check(upload.gradient, lie, upload.delta, bounds).failed


@EXAMPLES
@given(honest_uploads(), st.data())
def test_a_delta_outside_its_range_is_refused(case, data) -> None:
    upload, bounds = case
    lie = data.draw(outside(bounds.bits))
    v0, v1, _ = run_pair(Upload(upload.gradient, upload.norm, lie), bounds)
    assert v0.failed == ("delta",) == v1.failed
    assert plain_check(upload.gradient, upload.norm, lie, bounds).failed == ("delta",)


@EXAMPLES
@given(honest_uploads(), st.data())
def test_chosen_shares_do_not_help_an_out_of_range_upload(case, data) -> None:
    """Soundness needs no re-sharing (module doc): any split of a refused input is refused."""
    upload, bounds = case
    x = upload.gradient.copy()
    x[0] = data.draw(st.integers(3 * 2**bounds.bits, 2**63 - 1)) * data.draw(st.sampled_from((1, -1)))
    first = np.array(data.draw(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=x.size, max_size=x.size)))
    with np.errstate(over="ignore"):
        held = (HeldInput(first, 0, 0), HeldInput(x - first, upload.norm, upload.delta))
    *verdicts, _ = run_held(held, bounds)
    assert "range" in verdicts[0].failed and verdicts[0] == verdicts[1]


def test_an_honest_upload_whose_shares_wrap_passes_on_the_second_attempt() -> None:
    bounds = CheckBounds.make(3, F, 1.0)
    x = np.array([5, -7, 9], dtype=np.int64)
    s = int((x.astype(object) ** 2).sum())
    # share 0 small and positive, share 1 = x − share 0: the pair wraps for the unshared windows
    held = (HeldInput(np.array([2, 2, 2], dtype=np.int64), 1, 0), HeldInput(x - 2, int(np.sqrt(s)) - 1, 0))
    pipe = Pipe()
    *verdicts, _ = run_held(held, bounds, pipe)
    assert verdicts[0].accepted and verdicts[1].accepted
    assert max(step for step, _ in pipe.sent[0]) == 5, "the first attempt refused, the second (re-shared) accepted"


def test_the_poisoned_upload_is_refused_for_range_norm_and_delta() -> None:
    """g[0] = 2^30 with a correct binding, reported norm −1 and δ = 2^40 (the issue's poison)."""
    m = 1000
    bounds = CheckBounds.make(m, F, 10.0)
    g = np.full(m, 0.01, dtype=np.float32)
    upload = honest(g, F, 0.01)
    x = upload.gradient.copy()
    x[0] = 2**30 * 2**F
    poisoned = Upload(x, ring(-(2**F)), 2**40 * 2**F)
    v0, v1, _ = run_pair(poisoned, bounds)
    assert {"range", "reported_norm", "delta"} <= set(v0.failed) and v0 == v1
    assert "coordinate" in v0.reason() and "reported norm" in v0.reason() and "delta" in v0.reason()


def test_traffic_of_one_check() -> None:
    """Step 0 moves 3m + 5 words each way, steps 1 and 2 move 2 and 4; the dealer sends party 0
    one word per private product (3 + 5 + 2)."""
    m = 500
    bounds = CheckBounds.make(m, F, 1.0)
    g = np.random.default_rng(3).normal(size=m) * 0.01
    pipe = Pipe()
    _, _, dealer = run_pair(honest(g, F, 0.005), bounds, pipe)
    assert [msg.size for _, msg in pipe.sent[0]] == [3 * m + 5, 2, 4] == [msg.size for _, msg in pipe.sent[1]]
    assert dealer.fetched == 10 and dealer.requests == 1


def _poisoned(upload: Upload) -> Upload:
    x = upload.gradient.copy()
    x[0] = 2**40
    return Upload(x, ring(-1), 2**50)


def test_a_batch_of_ten_is_one_check_of_three_exchanges_and_one_dealer_request() -> None:
    """Ten items, all honest: 3 exchanges (3·10·m + 50, 20, 40 words) and one dealer request;
    with one poisoned item, the second attempt re-checks it alone: 6 exchanges, 2 requests,
    and only that item is refused."""
    m = 200
    bounds = CheckBounds.make(m, F, 1.0)
    rng = np.random.default_rng(11)
    uploads = [honest(rng.normal(size=m) * 0.01, F, 0.001) for _ in range(10)]
    pipe = Pipe()
    v0, v1, dealer = run_batch([u.shares() for u in uploads], bounds, pipe)
    assert all(v.accepted for v in v0 + v1)
    assert [msg.size for _, msg in pipe.sent[0]] == [30 * m + 50, 20, 40] == [msg.size for _, msg in pipe.sent[1]]
    assert dealer.requests == 1 and dealer.fetched == 100
    uploads[4] = _poisoned(uploads[4])
    pipe = Pipe()
    v0, v1, dealer = run_batch([u.shares() for u in uploads], bounds, pipe)
    assert v0 == v1 and [i for i, v in enumerate(v0) if not v.accepted] == [4]
    assert {"range", "reported_norm", "delta"} <= set(v0[4].failed)
    assert [step for step, _ in pipe.sent[0]] == list(range(6))
    assert [msg.size for _, msg in pipe.sent[0]][3:] == [3 * m + 5, 2, 4]
    assert dealer.requests == 2 and dealer.fetched == 110


@st.composite
def mixed_batches(draw) -> tuple[list[tuple[Upload, str]], CheckBounds]:
    """1–6 items over one bound, each with what it is: "honest", or refused by a margin by the
    named check (a coordinate, the reported norm or δ far out of its range)."""
    m = draw(st.integers(1, 120))
    norm_bound = min(draw(st.sampled_from(NORMS)), largest_norm(m, F))
    bounds = CheckBounds.make(m, F, norm_bound)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    items = []
    for _ in range(draw(st.integers(1, 6))):
        g = rng.normal(size=m)
        g *= norm_bound * draw(st.floats(0.0, 1.0)) / np.linalg.norm(g)
        upload = honest(g.astype(np.float32), F, float(np.abs(g).max()) * draw(st.floats(0.0, 1.0)))
        far = draw(st.integers(3 * 2**bounds.bits, 2**62)) * draw(st.sampled_from((1, -1)))
        kind = draw(st.sampled_from(("honest", "range", "reported_norm", "delta")))
        if kind == "range":
            x = upload.gradient.copy()
            x[draw(st.integers(0, m - 1))] = far
            upload = Upload(x, upload.norm, upload.delta)
        elif kind == "reported_norm":
            upload = Upload(upload.gradient, far, upload.delta)
        elif kind == "delta":
            upload = Upload(upload.gradient, upload.norm, far)
        items.append((upload, kind))
    return items, bounds


@EXAMPLES
@given(mixed_batches())
def test_a_batch_gives_each_item_its_own_verdict_the_same_as_in_cleartext(case) -> None:
    items, bounds = case
    v0, v1, _ = run_batch([u.shares() for u, _ in items], bounds)
    assert v0 == v1
    for (upload, kind), verdict in zip(items, v0, strict=True):
        plain = plain_check(upload.gradient, upload.norm, upload.delta, bounds)
        if kind == "honest":
            assert plain.accepted and verdict.accepted, (verdict, plain)
        else:
            assert kind in verdict.failed and kind in plain.failed, (kind, verdict, plain)


@pytest.mark.parametrize("norm", [0.0, -1.0, float("inf"), 17.1])
def test_bounds_refuse_a_norm_the_ring_cannot_hold(norm) -> None:
    with pytest.raises(ValueError, match="max_norm"):
        CheckBounds.make(582_026, F, norm)
    assert CheckBounds.make(582_026, F, largest_norm(582_026, F)).fits()
