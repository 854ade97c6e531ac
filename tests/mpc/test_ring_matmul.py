"""`ring_matmul` (multiply-adds over a short inner dimension) gives torch's int64 matmul exactly."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mpc.crypten_backend import SHORT_INNER, ring_matmul


@settings(max_examples=60, deadline=None)
@given(
    lead=st.lists(st.integers(1, 3), max_size=2).map(tuple),
    k=st.integers(1, SHORT_INNER + 2),
    m=st.integers(0, 6),
    vector=st.booleans(),
    seed=st.integers(0, 2**31),
)
def test_ring_matmul_is_the_wrapping_int64_matmul(lead, k, m, vector, seed):
    gen = torch.Generator().manual_seed(seed)
    left_shape = (k,) if vector else (*lead, k)
    left = torch.randint(-(2**63), 2**63 - 1, left_shape, generator=gen)
    right = torch.randint(-(2**63), 2**63 - 1, (k, m), generator=gen)
    expected = torch.matmul(left, right)  # full-range words: the products and sums wrap
    got = ring_matmul(left, right)
    assert got.shape == expected.shape and torch.equal(got, expected)
