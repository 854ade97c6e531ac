"""Composite protocols on the plaintext backend against direct torch references."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mpc.plain_backend import PlainBackend
from mpc.protocols import sectc
from mpc.protocols.secmi import MASK_RESIDUAL_MAX, refinements
from mpc.protocols.secsrt import bitonic_stages

B = PlainBackend()
GRID = 2.0**-16
# values on the fixed-point grid, including negatives, tiny and large ones
grid_values = st.integers(min_value=-(2**24), max_value=2**24).map(lambda k: k * GRID)
positive_values = st.integers(min_value=1, max_value=2**24).map(lambda k: k * GRID)


def sh(x) -> object:
    return B.share(torch.as_tensor(x, dtype=torch.float64))


@settings(deadline=None, max_examples=40)  # timing varies on a shared machine
@given(st.lists(st.tuples(grid_values, positive_values, grid_values, positive_values), min_size=1, max_size=20))
def test_ge2_matches_cross_products(rows):
    u_i, v_i, u_j, v_j = (torch.tensor(c, dtype=torch.float64) for c in zip(*rows, strict=True))
    got = B.reveal(B.ge2(sh(u_i), sh(v_i), sh(u_j), sh(v_j)))
    assert torch.equal(got, (u_i * v_j >= u_j * v_i).double())


def _signed_key(w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (2 * w - 1) * b.sqrt()


@settings(deadline=None, max_examples=40)  # timing varies on a shared machine
@given(st.lists(st.tuples(grid_values, positive_values, grid_values, positive_values), min_size=1, max_size=20))
def test_ge3_ge4_compare_signed_cosine_keys(rows):
    u_i, v_i, u_j, v_j = (torch.tensor(c, dtype=torch.float64) for c in zip(*rows, strict=True))
    w_i, w_j = (u_i >= 0).double(), (u_j >= 0).double()
    a_i, a_j = u_i * u_i, u_j * u_j
    # (2w−1)·√(a/v) = u/√v: the keys are the cosines' order
    key_i, key_j = u_i / v_i.sqrt(), u_j / v_j.sqrt()
    got4 = B.reveal(B.ge4(sh(w_i), sh(a_i), sh(v_i), sh(w_j), sh(a_j), sh(v_j)))
    b_i, b_j = a_i / v_i, a_j / v_j
    got3 = B.reveal(B.ge3(sh(w_i), sh(b_i), sh(w_j), sh(b_j)))
    assert torch.equal(got3, (_signed_key(w_i, b_i) >= _signed_key(w_j, b_j)).double())
    # ge4 is exact on squares: same sign -> compare a_i·v_j with a_j·v_i (reversed if negative)
    exact4 = torch.where(
        w_i != w_j,
        (w_i > w_j).double(),
        torch.where(w_i > 0, (a_i * v_j >= a_j * v_i).double(), (a_j * v_i >= a_i * v_j).double()),
    )
    assert torch.equal(got4, exact4)
    clear = (key_i - key_j).abs() > 1e-9 * (key_i.abs() + key_j.abs())
    assert torch.equal(got4[clear], (key_i >= key_j).double()[clear])
    assert torch.equal(got3[clear], got4[clear])


def test_ge3_ties_are_symmetric():
    w = sh([0.0, 1.0])
    b = sh([0.25, 0.25])
    assert torch.equal(B.reveal(B.ge3(w, b, w, b)), torch.ones(2, dtype=torch.float64))


@settings(deadline=None, max_examples=40)  # timing varies on a shared machine
@given(st.lists(grid_values, min_size=1, max_size=40))
def test_select_picks_exactly(values):
    a = torch.tensor(values, dtype=torch.float64)
    b = a.flip(0)
    bit = (a >= b).double()
    assert torch.equal(B.reveal(B.select(sh(bit), sh(a), sh(b))), torch.where(bit > 0, a, b))
    assert torch.equal(B.reveal(B.select(sh(bit), a, sh(b))), torch.where(bit > 0, a, b))
    assert torch.equal(B.reveal(B.select(sh(bit), sh(a), b)), torch.where(bit > 0, a, b))


@settings(deadline=None, max_examples=40)  # timing varies on a shared machine
@given(st.integers(1, 5), st.integers(1, 9), st.integers(0, 1), st.data())
def test_max_matches_torch(rows, cols, dim, data):
    vals = data.draw(st.lists(grid_values, min_size=rows * cols, max_size=rows * cols))
    x = torch.tensor(vals, dtype=torch.float64).reshape(rows, cols)
    assert torch.equal(B.reveal(B.max(sh(x), dim)), x.max(dim).values)


def test_max_three_dims_keeps_order():
    x = torch.randn(3, 4, 5, dtype=torch.float64)
    for dim in range(3):
        assert torch.equal(B.reveal(B.max(sh(x), dim)), x.max(dim).values)


@settings(deadline=None, max_examples=40)  # timing varies on a shared machine
@given(st.integers(1, 7).flatmap(lambda k: st.just(2**k)))
def test_bitonic_network_sorts_all_zero_one_inputs(n):
    # 0-1 principle on random inputs plus structure: every stage pairs disjoint positions
    stages = bitonic_stages(n)
    assert len(stages) == (int(math.log2(n)) * (int(math.log2(n)) + 1)) // 2
    for stage in stages:
        flat = [p for pair in stage for p in pair]
        assert len(flat) == len(set(flat)) == n
    gen = torch.Generator().manual_seed(n)
    for _ in range(50):
        x = torch.randint(0, 2, (n,), generator=gen).tolist()
        for stage in stages:
            for hi, lo in stage:
                if x[hi] < x[lo]:
                    x[hi], x[lo] = x[lo], x[hi]
        assert x == sorted(x, reverse=True)


@settings(deadline=None, max_examples=40)  # timing varies on a shared machine
@given(st.lists(st.integers(-50, 50), min_size=1, max_size=70))
def test_sort_ge_descending_with_payload(keys):
    k = torch.tensor(keys, dtype=torch.float64) * 0.125
    idx = torch.arange(len(keys), dtype=torch.float64)
    pay = torch.stack([idx, -idx], dim=1)
    sk, sp = B.sort_desc(sh(k), sh(pay), "ge")
    sk, sp = B.reveal(sk), B.reveal(sp)
    assert torch.equal(sk, torch.sort(k, descending=True).values)
    perm = sp[:, 0].long()
    assert sorted(perm.tolist()) == list(range(len(keys)))  # payload is a permutation
    assert torch.equal(k[perm], sk)  # and travels with its key
    assert torch.equal(sp[:, 1], -sp[:, 0])


def test_sort_ties_are_deterministic():
    k = torch.tensor([1.0, 2.0, 1.0, 2.0, 1.0], dtype=torch.float64)
    runs = [B.reveal(B.sort_desc(sh(k), sh(torch.arange(5.0)))[1]) for _ in range(3)]
    assert all(torch.equal(r, runs[0]) for r in runs)


@settings(deadline=None, max_examples=40)  # timing varies on a shared machine
@given(st.lists(st.tuples(grid_values, positive_values), min_size=2, max_size=40))
def test_sort_ge2_orders_by_ratio(pairs):
    uv = torch.tensor(pairs, dtype=torch.float64)
    sk, sp = B.sort_desc(sh(uv), sh(torch.arange(len(pairs), dtype=torch.float64)), "ge2")
    ratio = B.reveal(sk)[:, 0] / B.reveal(sk)[:, 1]
    assert (ratio[:-1] >= ratio[1:]).all()
    assert torch.equal(uv[B.reveal(sp).long()], B.reveal(sk))


@settings(deadline=None, max_examples=40)  # timing varies on a shared machine
@given(st.lists(st.tuples(grid_values, positive_values), min_size=2, max_size=20))
def test_sort_ge4_equals_ge2_order_of_cosines(pairs):
    uv = torch.tensor(pairs, dtype=torch.float64)
    u, v = uv[:, 0], uv[:, 1]
    keys = torch.stack([(u >= 0).double(), u * u, v], dim=1)
    _, perm = B.sort_desc(sh(keys), sh(torch.arange(len(pairs), dtype=torch.float64)), "ge4")
    key = u / v.sqrt()
    sorted_key = key[B.reveal(perm).long()]
    assert (sorted_key[:-1] >= sorted_key[1:] - 1e-12 * sorted_key.abs()[:-1].clamp(min=1)).all()


def test_sort_rejects_bad_shapes():
    import pytest

    with pytest.raises(ValueError, match="column"):
        B.sort_desc(sh([1.0, 2.0]), sh([0.0, 1.0]), "ge2")
    with pytest.raises(ValueError, match="unknown"):
        B.sort_desc(sh([1.0, 2.0]), sh([0.0, 1.0]), "nope")


@given(st.integers(1, 6), st.integers(2, 5), st.sampled_from(["secmi", "newton"]))
@settings(deadline=None, max_examples=40)
def test_inverse_matches_torch(batch, d, method):
    gen = torch.Generator().manual_seed(batch * 10 + d)
    k = torch.randn(batch, d, d, generator=gen, dtype=torch.float64) + 3 * torch.eye(d, dtype=torch.float64)
    got = B.reveal(B.inverse(sh(k), method))
    assert torch.allclose(got, torch.linalg.inv(k), atol=1e-8)


@given(st.integers(1, 4), st.integers(2, 5), st.data())
@settings(deadline=None, max_examples=30)
def test_secmi_inverts_through_a_mask_that_makes_n_singular(batch, d, data):
    """A degenerate mask (a zero column in one matrix of the batch) opens a singular N = K·R:
    SecMI computes K⁻¹ by Newton–Schulz instead of failing."""
    gen = torch.Generator().manual_seed(data.draw(st.integers(0, 2**16)))
    a = torch.randn(batch, d, d, generator=gen, dtype=torch.float64)
    k = (a + a.transpose(1, 2)) / 4 + 3 * torch.diag_embed(torch.tensor([1.0, -1.0]).repeat(d)[:d].expand(batch, d))
    mask = torch.randn(batch, d, d, generator=gen, dtype=torch.float64)
    mask[data.draw(st.integers(0, batch - 1)), :, data.draw(st.integers(0, d - 1))] = 0.0
    backend = PlainBackend()
    backend.random = lambda shape: sh(mask)  # type: ignore[method-assign]
    assert int(torch.linalg.inv_ex(k @ mask).info.count_nonzero()) == 1  # N is singular
    got = backend.reveal(backend.inverse(sh(k), "secmi"))
    assert torch.allclose(got, torch.linalg.inv(k), atol=1e-8)


@given(st.floats(0.0, MASK_RESIDUAL_MAX, exclude_max=True), st.integers(8, 24))
def test_secmi_refines_the_fewest_times_that_reach_one_ulp(rho, f):
    ulp = 2.0**-f
    steps = refinements(rho, ulp)
    assert rho ** (2**steps) <= ulp  # each Newton–Schulz step squares the residual
    assert steps == 0 or rho ** (2 ** (steps - 1)) > ulp
    assert steps <= math.ceil(math.log2(f))  # ρ < 1/2: (1/2)^(2^s) ≤ 2^-f once 2^s ≥ f


@settings(deadline=None, max_examples=40)  # timing varies on a shared machine
@given(st.integers(1, 6), st.integers(1, 60), st.data())
def test_threshold_flags_any_coordinate_exceeds(n, m, data):
    g = torch.tensor(data.draw(st.lists(grid_values, min_size=n * m, max_size=n * m)), dtype=torch.float64).reshape(
        n, m
    )
    delta = torch.tensor(data.draw(st.lists(positive_values, min_size=n, max_size=n)), dtype=torch.float64)
    expected = (g.abs() > delta[:, None]).any(dim=1)
    assert torch.equal(B.threshold_flags(sh(g), sh(delta)), expected)
    sample = torch.tensor(data.draw(st.lists(st.integers(0, m - 1), min_size=1, max_size=m)))
    assert torch.equal(B.threshold_flags(sh(g), sh(delta), sample), expected)


@settings(deadline=None, max_examples=40)
@given(st.integers(1, 6), st.integers(1, 60), st.integers(1, 12), st.data())
def test_threshold_flags_do_not_depend_on_the_column_blocks(n, m, block, data):
    """Blocks of `block` coordinates (fewer than one row up to several rows) give the flags of one pass."""
    g = torch.tensor(data.draw(st.lists(grid_values, min_size=n * m, max_size=n * m)), dtype=torch.float64).reshape(
        n, m
    )
    delta = torch.tensor(data.draw(st.lists(positive_values, min_size=n, max_size=n)), dtype=torch.float64)
    sample = torch.tensor(data.draw(st.lists(st.integers(0, m - 1), min_size=1, max_size=m)))
    expected = (g.abs() > delta[:, None]).any(dim=1)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sectc, "BLOCK_ELEMENTS", block)
        assert torch.equal(B.threshold_flags(sh(g), sh(delta)), expected)
        assert torch.equal(B.threshold_flags(sh(g), sh(delta), sample), expected)


def test_threshold_equal_to_delta_does_not_fire():
    g = sh([[0.5, -0.5], [0.5, -0.75]])
    assert B.threshold_flags(g, sh([0.5, 0.5])).tolist() == [False, True]


def test_fixed_matmul_takes_one_fixed_operand_per_row():
    """`shape` stacks one operand per row, (K, m) or batched (b, K/b, m); a view that cuts
    across operands is refused with a clear error (the 2PC backend forms the product row by row)."""
    rows = B.fix([B.share(torch.arange(4.0) + i) for i in range(6)])
    x = B.share(torch.ones(3, 1, 2))
    expected = torch.stack([torch.arange(4.0) + i for i in range(6)]).reshape(3, 2, 4).sum(1, keepdim=True)
    assert torch.equal(B.reveal(B.fixed_matmul(x, rows, (3, 2, 4))), expected)
    assert B.reveal(B.fixed_matmul(B.share(torch.ones(1, 6)), rows, (6, 4))).shape == (1, 4)
    for bad, shape in ((x, (3, 4, 2)), (x, (3, 8, 1)), (B.share(torch.ones(1, 6)), (1, 6, 4)), (x, (24,))):
        with pytest.raises(ValueError, match="one of the 6 fixed operands per row"):
            B.fixed_matmul(bad, rows, shape)
