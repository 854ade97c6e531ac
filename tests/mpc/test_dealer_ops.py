"""Every dealer request kind yields correct correlated randomness (no network needed).

Two parties' PRG streams and the dealer's copies of both are built from the same keys;
the parties' shares then reconstruct exactly the value the kind promises, and the two
ends consumed their streams identically (so the next request stays in step).
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mpc.plane.dealer_ops import OPS, RequestError, count_wraps, parse, request
from mpc.plane.prg import Prg, new_key

dims = st.integers(0, 5)


def _shares(kind: str, shapes):
    keys = (new_key(), new_key())
    party, dealer = [Prg(k) for k in keys], [Prg(k) for k in keys]
    op, req = request(kind, shapes)
    out0 = op.party_shares(party[0], 0, req, lambda r: op.dealer_share0(dealer[0], dealer[1], r))
    out1 = op.party_shares(party[1], 1, req, lambda r: pytest.fail("party 1 never asks the dealer"))
    assert [p.words for p in party] == [d.words for d in dealer]
    return out0, out1


@settings(max_examples=25, deadline=None)
@given(m=dims, k=dims, n=dims, kind=st.sampled_from(["mul", "matmul", "binary"]))
def test_triples(m, k, n, kind):
    shapes = [(m, k), (k, n)] if kind == "matmul" else [(m, 1), (1, n)]
    ((a0, b0), c0), ((a1, b1), c1) = _shares(kind, shapes)
    if kind == "binary":
        assert torch.equal(c0 ^ c1, (a0 ^ a1) & (b0 ^ b1))
    else:
        fn = torch.matmul if kind == "matmul" else torch.mul
        assert torch.equal(c0 + c1, fn(a0 + a1, b0 + b1))


@settings(max_examples=25, deadline=None)
@given(shape=st.lists(dims, max_size=3).map(tuple))
def test_square_wraps_b2a(shape):
    ((r0,), s0), ((r1,), s1) = _shares("square", [shape])
    assert torch.equal(s0 + s1, (r0 + r1) * (r0 + r1))
    ((w0,), t0), ((w1,), t1) = _shares("wraps", [shape])
    assert torch.equal(t0 + t1, count_wraps(w0, w1))
    ((bit0,), ar0), ((bit1,), ar1) = _shares("b2a", [shape])
    assert set((bit0 ^ bit1).unique().tolist()) <= {0, 1}
    assert torch.equal(ar0 + ar1, bit0 ^ bit1)


def test_count_wraps_against_python_integers():
    gen = torch.Generator().manual_seed(0)
    r0, r1 = (torch.randint(-(2**63), 2**63 - 1, (2000,), generator=gen) for _ in range(2))
    r0[:2], r1[:2] = torch.tensor([-(2**63), 2**62]), torch.tensor([-(2**63), 2**62])
    theta = count_wraps(r0, r1)
    for x, y, t in zip(r0.tolist(), r1.tolist(), theta.tolist(), strict=True):
        wrapped = (x + y + 2**63) % 2**64 - 2**63
        assert x + y == wrapped + t * 2**64


@pytest.mark.parametrize(
    "message, why",
    [
        ({"kind": "conv2d", "shapes": [[1], [1]]}, "unknown request kind"),
        ({"kind": "mul", "shapes": [[2]]}, "takes 2 shape"),
        ({"kind": "mul", "shapes": [[2], [-1]]}, "non-negative"),
        ({"kind": "mul", "shapes": [[2], [True]]}, "non-negative"),
        ({"kind": "mul", "shapes": [[2, 3], [4]]}, "do not combine"),
        ({"kind": "matmul", "shapes": [[2, 3], [4, 5]]}, "do not combine"),
        ({"kind": "square", "shapes": [[1001]]}, "limit of 1000"),
        ({"kind": "square", "shapes": "[3]"}, "takes 1 shape"),
    ],
)
def test_bad_requests_refused(message, why):
    with pytest.raises(RequestError, match=why):
        parse(message, limit=1000)


def test_registry_lists_cryptens_ttp_kinds():
    assert set(OPS) == {"mul", "matmul", "square", "binary", "wraps", "b2a"}
