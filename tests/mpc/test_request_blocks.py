"""Dealer requests that grow with the job go in blocks (`mpc.plane.request_blocks`): the
blocks cover the request exactly, and under 2PC against the real dealer a blocked square,
product, batched fixed-operand product and fixed scalar products give the plaintext values."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from mpc.fixedpoint import DEFAULT_PRECISION_BITS
from mpc.plane import request_blocks
from mpc.plane.request_blocks import element_ranges, item_groups

from helpers import twoparty_cases as cases

pytestmark = pytest.mark.timeout(600)
ULP = 2.0**-DEFAULT_PRECISION_BITS


@given(st.lists(st.integers(0, 40), min_size=1, max_size=3), st.integers(1, 50))
def test_element_ranges_cover_the_tensor_in_blocks(shape, block):
    outer, request_blocks.BLOCK_ELEMENTS = request_blocks.BLOCK_ELEMENTS, block
    try:
        ranges = element_ranges(shape)
    finally:
        request_blocks.BLOCK_ELEMENTS = outer
    starts = [a for a, _ in ranges]
    assert starts[0] == 0 and ranges[-1][1] == math.prod(shape)
    assert all(b == c for (_, b), (c, _) in zip(ranges, ranges[1:], strict=False))  # contiguous
    assert all(0 <= b - a <= block for a, b in ranges)


@given(st.integers(0, 60), st.integers(1, 30), st.integers(1, 100))
def test_item_groups_cover_the_items_within_a_block(count, per_item, block):
    outer, request_blocks.BLOCK_ELEMENTS = request_blocks.BLOCK_ELEMENTS, block
    try:
        groups = item_groups(count, per_item)
    finally:
        request_blocks.BLOCK_ELEMENTS = outer
    assert [i for g in groups for i in g] == list(range(count))
    assert all(len(g) * per_item <= block or len(g) == 1 for g in groups)


def test_blocked_requests_give_the_plaintext_values(cluster):
    torch.manual_seed(3)
    n, k, m, block = 4, 2, 20, 64
    x = torch.round(torch.randn(5, 40) * 2**10) / 2**10
    rows = torch.round(torch.randn(n * k, m) * 2**10) / 2**10
    c = torch.round(torch.randn(n, 1, k) * 2**10) / 2**10
    got, _ = cluster.run(cases.blocked_requests, block, x, rows, c)
    assert float((got["square"] - x * x).abs().max()) < 4 * ULP * float(x.abs().max() + 1)
    assert float((got["product"] - x * x).abs().max()) < 4 * ULP * float(x.abs().max() + 1)
    expected = c @ rows.reshape(n, k, m)
    assert float((got["batched"].reshape(expected.shape) - expected).abs().max()) < 4 * ULP
    summed = c.reshape(1, n * k) @ rows
    assert float((got["summed"] - summed).abs().max()) < 4 * ULP
    assert float((got["dots"] - (rows[:-1] * rows[1:]).sum(1)).abs().max()) < 4 * ULP
    # 200 elements in blocks of 64: 4 square pairs and 4 mul triples; the batch's k·m = 40 rebuilt mask
    # words per entry: one matmul_fixed pair per entry (4); the summed product's n·k = 8 rows of
    # m = 20 words: groups of 3 rows, one pair each (3); a scalar product's 2·m = 40: one per request (7)
    assert got["requests"] == 4 + 4 + 4 + 3 + 7
