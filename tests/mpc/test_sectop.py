"""SecTop (`mpc/protocols/sectop.py`) on the plaintext backend: the set of the k largest rows."""

from __future__ import annotations

from fractions import Fraction

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from mpc.plain_backend import PlainBackend
from mpc.protocols import sectop
from mpc.protocols.sectop import PAIRWISE_MAX_ROWS

B = PlainBackend()
GRID = 2.0**-16
grid_values = st.integers(min_value=-(2**20), max_value=2**20).map(lambda k: k * GRID)
positive_values = st.integers(min_value=1, max_value=2**20).map(lambda k: k * GRID)


def sh(x) -> object:
    return B.share(torch.as_tensor(x, dtype=torch.float64))


def reference_top(scores: list[Fraction], k: int) -> tuple[int, ...]:
    """The k best rows by exact score, ties to the lower row, as increasing positions."""
    return tuple(sorted(sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:k]))


@settings(deadline=None, max_examples=60)
@given(st.lists(st.integers(-4, 4).map(lambda k: k * 0.25), min_size=1, max_size=40), st.data())
def test_ge_top_set_is_the_k_largest_with_ties_to_the_lower_row(keys, data):
    k = data.draw(st.integers(1, len(keys)))
    assert B.top_set(sh(keys), k, "ge") == reference_top([Fraction(x) for x in keys], k)


@settings(deadline=None, max_examples=60)
@given(st.lists(st.tuples(grid_values, positive_values), min_size=2, max_size=40), st.data())
def test_ge2_top_set_orders_by_the_exact_ratio(pairs, data):
    k = data.draw(st.integers(1, len(pairs)))
    scores = [Fraction(u) / Fraction(v) for u, v in pairs]
    assert B.top_set(sh(pairs), k, "ge2") == reference_top(scores, k)


@settings(deadline=None, max_examples=40)
@given(st.lists(st.tuples(grid_values, positive_values), min_size=2, max_size=30), st.data())
def test_ge4_top_set_orders_by_the_signed_squared_cosine(pairs, data):
    k = data.draw(st.integers(1, len(pairs)))
    keys = [(1.0 if u >= 0 else 0.0, u * u, v) for u, v in pairs]
    assume(all(Fraction(a) == Fraction(u) ** 2 for (u, _), (_, a, _) in zip(pairs, keys, strict=True)))
    scores = [(1 if u >= 0 else -1) * Fraction(u) ** 2 / Fraction(v) for u, v in pairs]
    assert B.top_set(sh(keys), k, "ge4") == reference_top(scores, k)


def test_zero_score_rows_tie_to_the_earlier_ones():
    """Rows scoring exactly 0 (u = 0, v = 1: no target in the round) fill up from the earliest."""
    pairs = [(0.0, 1.0), (0.5, 1.0), (0.0, 1.0), (-0.5, 1.0), (0.0, 1.0), (0.25, 2.0)]
    assert B.top_set(sh(pairs), 2, "ge2") == (1, 5)
    assert B.top_set(sh(pairs), 4, "ge2") == (0, 1, 2, 5)
    assert B.top_set(sh(pairs), 6, "ge2") == tuple(range(6))


def test_more_rows_than_the_pairwise_bound_are_sorted(monkeypatch):
    n = PAIRWISE_MAX_ROWS + 3
    keys = torch.randperm(n, generator=torch.Generator().manual_seed(5)).to(torch.float64)

    def no_ranks(*args):
        raise AssertionError("ranked pairwise above the bound")

    monkeypatch.setattr(sectop, "_ranked_top", no_ranks)
    want = reference_top([Fraction(float(x)) for x in keys], 17)
    assert B.top_set(sh(keys), 17, "ge") == want


def test_keys_that_are_no_order_fall_back_to_the_sort():
    """A reported norm v ≤ 0 makes u·v' ≥ u'·v intransitive: the ranks collide, the opened
    count shows it, and the sorting network chooses exactly k rows."""
    pairs = [(-3.0, 2.0), (0.0, -2.0), (2.0, 2.0)]
    assert sectop._ranked_top(B, sh(pairs), 1, "ge2") is None
    positions = sh(torch.arange(3, dtype=torch.float64))
    _, order = B.sort_desc(sh(pairs), positions, "ge2")
    assert B.top_set(sh(pairs), 1, "ge2") == (int(B.reveal(order)[0]),)


def test_rank_matrix_counts_the_rows_before_each():
    first, second, ranks, offsets = sectop.rank_matrix(4)
    pairs = list(zip(first.tolist(), second.tolist(), strict=True))
    assert pairs == [(i, j) for i in range(4) for j in range(i + 1, 4)]
    all_first = torch.ones(first.numel(), dtype=torch.float64)  # every earlier row ≽ every later one
    assert (ranks @ all_first + offsets).tolist() == [0.0, 1.0, 2.0, 3.0]
    assert (ranks @ torch.zeros_like(all_first) + offsets).tolist() == [3.0, 2.0, 1.0, 0.0]


def test_top_set_rejects_bad_arguments():
    with pytest.raises(ValueError, match="cannot choose"):
        B.top_set(sh([1.0, 2.0]), 3, "ge")
    with pytest.raises(ValueError, match="cannot choose"):
        B.top_set(sh([1.0, 2.0]), 0, "ge")
    with pytest.raises(ValueError, match="unknown"):
        B.top_set(sh([1.0, 2.0]), 1, "nope")
    with pytest.raises(ValueError, match="column"):
        B.top_set(sh([1.0, 2.0, 3.0]), 1, "ge2")


@settings(deadline=None, max_examples=20)
@given(st.lists(st.integers(1, 64), min_size=1, max_size=12, unique=True))
def test_open_as_set_opens_the_sorted_set(values):
    """Whatever order the secret integers come in, the opened tuple is the sorted set."""
    assert sectop.open_as_set(B, sh(values)) == tuple(sorted(values))
