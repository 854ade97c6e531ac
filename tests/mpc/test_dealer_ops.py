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

from mpc.plane.dealer_ops import MAX_FIXED, OPS, RequestError, count_wraps, fixed_mask, parse, request
from mpc.plane.fixed_masks import MaskStackCache
from mpc.plane.prg import Prg, new_key

dims = st.integers(0, 5)


def _shares(kind: str, shapes, fixed=None, keys=None):
    keys = keys or (new_key(), new_key())
    party, dealer = [Prg(k) for k in keys], [Prg(k) for k in keys]
    op, req = request(kind, shapes, fixed)
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


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(1, 3),
    k=st.integers(1, 3),
    m=dims,
    rows=st.integers(1, 2),
    first=st.integers(0, 2**62),
)
def test_matmul_fixed_reconstructs_a_times_the_fixed_masks(n, k, m, rows, first):
    """C = A @ B with B the fixed operands' masks, each rebuilt from both parties' derived streams."""
    keys = (new_key(), new_key())
    ids = [first + 3 * i for i in range(n * k)]  # any numbers, in the caller's stacking order
    ((a0,), c0), ((a1,), c1) = _shares("matmul_fixed", [(n, rows, k), (m,), (n, k, m)], ids, keys)
    masks = [torch.stack([fixed_mask(Prg(key), i, (m,)) for i in ids]) for key in keys]
    b = (masks[0] + masks[1]).reshape(n, k, m)
    assert torch.equal(c0 + c1, torch.matmul(a0 + a1, b))
    assert c0.shape == (n, rows, m)


@settings(max_examples=25, deadline=None)
@given(count=st.integers(1, 4), m=dims, data=st.data())
def test_dot_fixed_reconstructs_the_masks_scalar_products(count, m, data):
    """V_c = Σ B_{i_c}·B_{j_c}, ids repeated or paired with themselves included."""
    keys = (new_key(), new_key())
    ids = data.draw(st.lists(st.integers(0, 5), min_size=2 * count, max_size=2 * count))
    (local0, c0), (local1, c1) = _shares("dot_fixed", [(m,), (count,)], ids, keys)
    assert local0 == [] and local1 == []
    mask = {i: fixed_mask(Prg(keys[0]), i, (m,)) + fixed_mask(Prg(keys[1]), i, (m,)) for i in ids}
    expected = torch.stack([(mask[i] * mask[j]).sum() for i, j in zip(ids[::2], ids[1::2], strict=True)])
    assert torch.equal(c0 + c1, expected)


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(1, 3),
    k=st.integers(1, 2),
    m=st.integers(1, 5),
    order=st.lists(st.integers(0, 2), min_size=1, max_size=5),
)
def test_a_kept_mask_stack_gives_the_shares_a_rebuilt_one_gives(n, k, m, order):
    """A dealer keeping its last stack of fixed masks answers every `matmul_fixed` request of a
    sequence (the same ids again, other ids, back) with the very share a dealer rebuilding the
    stack every time answers, and the parties' shares reconstruct a @ B each time."""
    keys = (new_key(), new_key())
    party, kept, rebuilt = ([Prg(key) for key in keys] for _ in range(3))
    cache = MaskStackCache()
    id_sets = [list(range(n * k)), list(range(n * k, 2 * n * k)), list(range(n * k))[::-1]]
    previous: list[int] = []
    for which in order:
        ids = id_sets[which]
        op, req = request("matmul_fixed", [(n, 1, k), (m,), (n, k, m)], ids)
        before = cache.rebuilds
        (a0,), c0 = op.party_shares(party[0], 0, req, lambda r, op=op: op.dealer_share0(kept[0], kept[1], r, cache))
        (a1,), c1 = op.party_shares(party[1], 1, req, lambda r: pytest.fail("party 1 never asks the dealer"))
        assert torch.equal(c0, op.dealer_share0(rebuilt[0], rebuilt[1], req))
        b = torch.stack([fixed_mask(Prg(keys[0]), i, (m,)) + fixed_mask(Prg(keys[1]), i, (m,)) for i in ids])
        assert torch.equal(c0 + c1, torch.matmul(a0 + a1, b.reshape(n, k, m)))
        assert cache.elements == n * k * m  # one stack kept, whatever came before
        assert [p.words for p in party] == [d.words for d in kept] == [d.words for d in rebuilt]
        assert cache.rebuilds - before == (ids != previous)  # the same ids again rebuild nothing
        previous = ids
    cache.clear()
    assert cache.elements == 0


def test_fixed_masks_are_independent_of_the_main_stream():
    """Drawing a fixed mask leaves the main stream where it was, and numbers give distinct masks."""
    prg = Prg(new_key())
    first = fixed_mask(prg, 0, (4,))
    assert prg.words == 0
    assert torch.equal(first, fixed_mask(prg, 0, (4,)))
    assert not torch.equal(first, fixed_mask(prg, 1, (4,)))
    assert not torch.equal(first, prg.ring((4,)))


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
        ({"kind": "mul", "shapes": [[2], [2]], "fixed": [0]}, "takes no fixed operands"),
        ({"kind": "matmul_fixed", "shapes": [[1, 2], [3], [2, 3]]}, "list of 1 to"),
        ({"kind": "matmul_fixed", "shapes": [[1, 2], [3], [2, 3]], "fixed": []}, "list of 1 to"),
        ({"kind": "matmul_fixed", "shapes": [[1, 2], [3], [2, 3]], "fixed": [0, -1]}, "non-negative"),
        ({"kind": "matmul_fixed", "shapes": [[1, 2], [3], [2, 3]], "fixed": [0, True]}, "non-negative"),
        ({"kind": "matmul_fixed", "shapes": [[1, 2], [3], [2, 3]], "fixed": [0, 1.5]}, "non-negative"),
        ({"kind": "matmul_fixed", "shapes": [[1, 2], [3], [2, 3]], "fixed": "01"}, "list of 1 to"),
        ({"kind": "matmul_fixed", "shapes": [[1, 2], [3], [2, 3]], "fixed": [0]}, "do not fit"),
        ({"kind": "matmul_fixed", "shapes": [[1, 2], [3], [3, 2]], "fixed": [0, 1]}, "do not combine"),
        ({"kind": "matmul_fixed", "shapes": [[1, 2], [3], [2, 3]], "fixed": [0] * (MAX_FIXED + 1)}, "list of 1 to"),
        ({"kind": "matmul_fixed", "shapes": [[1, 2], [600], [2, 600]], "fixed": [0, 1]}, "limit of 1000"),
        ({"kind": "matmul_fixed", "shapes": [[1, 2], [3], [2, 3]], "fixed": [0, 2**63]}, "non-negative"),
        ({"kind": "dot_fixed", "shapes": [[3], [2]], "fixed": [0, 1, 2]}, "do not fit"),
        ({"kind": "dot_fixed", "shapes": [[3], [1, 1]], "fixed": [0, 1]}, "do not combine"),
        ({"kind": "dot_fixed", "shapes": [[3]], "fixed": [0, 1]}, "takes 2 shape"),
        ({"kind": "dot_fixed", "shapes": [[300], [2]], "fixed": [0, 1, 2, 3]}, "rebuilt masks exceed"),
        ({"kind": "private_dot", "shapes": [[3], [1, 1]]}, "do not combine"),
        ({"kind": "private_dot", "shapes": [[2, 3]]}, "takes 2 shape"),
        ({"kind": "private_dot", "shapes": [[2, 600], [1, 1]]}, "limit of 1000"),
    ],
)
def test_bad_requests_refused(message, why):
    with pytest.raises(RequestError, match=why):
        parse(message, limit=1000)


def test_registry_lists_cryptens_ttp_kinds_the_fixed_operand_kinds_and_private_dot():
    assert set(OPS) == {"mul", "matmul", "square", "binary", "wraps", "b2a", "matmul_fixed", "dot_fixed", "private_dot"}


@settings(max_examples=25, deadline=None)
@given(rows=dims, length=dims, scalars=dims)
def test_private_dot_gives_each_party_its_own_mask_and_shares_of_their_product(rows, length, scalars):
    ((alpha, a1), v0), ((beta, b1), v1) = _shares("private_dot", [(rows, length), (scalars, 1)])
    assert alpha.shape == beta.shape == (rows, length) and a1.shape == b1.shape == (scalars, 1)
    assert torch.equal(v0 + v1, torch.cat([(alpha * beta).sum(-1), (a1 * b1).sum(-1)]))
