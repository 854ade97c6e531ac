"""Products at the edges of the documented range (docs/NUMERICS.md) and fault detection."""

from __future__ import annotations

import pytest
import torch

from mpc.fixedpoint import DEFAULT_PRECISION_BITS

from helpers import twoparty_cases as cases

pytestmark = pytest.mark.timeout(300)
ULP = 2.0**-DEFAULT_PRECISION_BITS


def _grid(x: torch.Tensor) -> torch.Tensor:
    return torch.round(x / ULP) * ULP


def test_products_at_the_edge_of_the_documented_range_are_accurate(cluster):
    # documented: |a·b| ≤ 2^4 → fault probability ≤ 2^(4+2f−64) = 2^-28 per product
    gen = torch.Generator().manual_seed(11)
    n = 20000
    x = _grid((torch.rand(n, generator=gen, dtype=torch.float64) * 2 - 1) * 4)
    y = _grid((torch.rand(n, generator=gen, dtype=torch.float64) * 2 - 1) * 4)
    x[:4] = torch.tensor([4.0, -4.0, 4.0, -4.0])
    y[:4] = torch.tensor([4.0, 4.0, -4.0, -4.0])
    got, _ = cluster.run(cases.products, x, y)
    assert isinstance(got, torch.Tensor), got
    assert float((got - x * y).abs().max()) < 2 * ULP  # one local truncation: < 2 ulp


def test_tiny_products_keep_their_sign_and_magnitude(cluster):
    # gradients ~1e-3: the truncated product underflows to within 1 ulp of zero, never worse
    x = _grid(torch.tensor([1e-3, -1e-3, 3e-3, -2e-2, 0.0], dtype=torch.float64))
    got, _ = cluster.run(cases.products, x, x.flip(0))
    assert float((got - x * x.flip(0)).abs().max()) < 2 * ULP


def test_products_beyond_the_range_fault_and_are_detected(cluster):
    # |a·b| = 2^24: a local-truncation fault hits ≈ 1 in 256 products; 4096 products fault
    # with probability 1 − e^-16, and reveal must refuse the result rather than return it
    x = torch.full((4096,), 2.0**12, dtype=torch.float64)
    got, _ = cluster.run(cases.products, x, -x)
    assert isinstance(got, str) and got.startswith("TruncationFaultError"), got


def test_cost_accounting_splits_online_and_offline(cluster):
    ledger, other = cluster.run(cases.costs, 1000)
    mul, ge = ledger["mul"], ledger["ge"]
    assert mul["calls"] == ge["calls"] == 1
    # SecMul: one Beaver opening of two 1000-element tensors (+ the 8-byte step check)
    assert mul["online_bytes"] >= 2 * 1000 * 8 and mul["online_rounds"] >= 1
    # party 0 fetches the triple from the dealer (c: 1000 ring elements); party 1 expands a seed
    assert mul["offline_bytes"] == 1000 * 8 and other["mul"]["offline_bytes"] == 0
    assert ge["online_rounds"] > mul["online_rounds"] and ge["offline_bytes"] > mul["offline_bytes"]


def test_long_scalar_products_are_truncated_once(cluster):
    """SecSP over many terms stays within one truncation's error (< 2 ulp): the products are
    summed before truncating, so the error does not grow with the length (per-term
    truncation would add up to 2 ulp per term)."""
    gen = torch.Generator().manual_seed(7)
    # values on the fixed-point grid (encoding is exact), products with 2f fractional bits
    x = torch.randint(-(2**14), 2**14, (8, 512), generator=gen).to(torch.float64) * ULP
    y = torch.randint(-(2**14), 2**14, (8, 512), generator=gen).to(torch.float64) * ULP
    got, _ = cluster.run(cases.scalar_products, x, y)
    err = float((got - (x * y).sum(-1)).abs().max())
    assert err < 2 * ULP, err / ULP
