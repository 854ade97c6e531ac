"""SecSrt: bitonic sort, descending, with an obliviously swapped payload.

Starfish Algorithm 1 line 8 (SecSrt(L, SecGE2)) and line 15 (SecSrt(L, SecGE)),
Algorithm 6 lines 8/15 (SecGE4 / SecGE3); cost in Appendix B Table VI (O(T log² T)
comparisons and SecSel calls, O(log² T) rounds).

Network. The n rows are conceptually padded to n' = 2^⌈log₂ n⌉ with virtual rows whose key
is −∞. Batcher's bitonic network on n' positions is fixed and public; a comparator between
a real and a virtual row has a publicly known outcome (the real row is larger), so it is
resolved by a public move and costs nothing. Every comparator between two real rows of one
stage goes into ONE comparison call and ONE multiplication:

    c = cmp(key_hi, key_lo)                       (shared bit, 1 iff the row at `hi` is ≥)
    [row_hi | row_lo] ← SecSel(c, [row_hi | row_lo], [row_lo | row_hi])
                                                  (keys and payload columns together)

so rows are only ever moved, never recomputed: with exact comparison bits (CrypTen bits
are integer sharings) the sorted keys and payload are bit-for-bit copies of the inputs.

Ties: a comparator keeps its two rows in place when c = 1, i.e. when key_hi ≥ key_lo. This
rule is part of the network, so equal keys end up in the same (deterministic) order on
every backend.

Comparisons (pluggable, `COMPARATORS`): "ge" (keys (n,)), "ge2" (keys (n, 2) = (u, v),
order by u/v, v > 0), "ge3" (keys (n, 2) = (w, b)), "ge4" (keys (n, 3) = (w, a, v)).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from mpc.primitives import Primitives, Secret
from mpc.protocols.secge import sec_ge2, sec_ge3, sec_ge4

Comparator = Callable[[Primitives, Secret, Secret], Secret]
"""cmp(backend, keys_a (m, c), keys_b (m, c)) -> shared bits (m,) = [key_a ≽ key_b]."""


def _col(backend: Primitives, keys: Secret, k: int) -> Secret:
    return backend.index(keys, (slice(None), k))


def _cmp_ge(backend: Primitives, a: Secret, b: Secret) -> Secret:
    return backend.ge(_col(backend, a, 0), _col(backend, b, 0))


def _cmp_ge2(backend: Primitives, a: Secret, b: Secret) -> Secret:
    return sec_ge2(backend, _col(backend, a, 0), _col(backend, a, 1), _col(backend, b, 0), _col(backend, b, 1))


def _cmp_ge3(backend: Primitives, a: Secret, b: Secret) -> Secret:
    return sec_ge3(backend, _col(backend, a, 0), _col(backend, a, 1), _col(backend, b, 0), _col(backend, b, 1))


def _cmp_ge4(backend: Primitives, a: Secret, b: Secret) -> Secret:
    c = [_col(backend, a, k) for k in range(3)] + [_col(backend, b, k) for k in range(3)]
    return sec_ge4(backend, *c)


COMPARATORS: dict[str, tuple[int, Comparator]] = {
    "ge": (1, _cmp_ge),
    "ge2": (2, _cmp_ge2),
    "ge3": (2, _cmp_ge3),
    "ge4": (3, _cmp_ge4),
}
"""method -> (number of key columns, comparison)."""


def bitonic_stages(n_pad: int) -> list[list[tuple[int, int]]]:
    """Comparators of the descending bitonic network on n_pad = 2^k positions.

    Each stage is a list of disjoint (hi, lo) pairs: after the comparator, position `hi`
    holds the larger row. Stage (size, stride) follows Batcher: partner = i XOR stride;
    blocks with (i AND size) = 0 are sorted descending, the others ascending.
    """
    if n_pad < 1 or n_pad & (n_pad - 1):
        raise ValueError(f"network size must be a power of two, got {n_pad}")
    stages: list[list[tuple[int, int]]] = []
    size = 2
    while size <= n_pad:
        stride = size // 2
        while stride >= 1:
            stage = []
            for i in range(n_pad):
                partner = i ^ stride
                if partner > i:
                    stage.append((i, partner) if i & size == 0 else (partner, i))
            stages.append(stage)
            stride //= 2
        size *= 2
    return stages


def _as_matrix(backend: Primitives, x: Secret) -> Secret:
    return backend.reshape(x, (x.shape[0], 1)) if len(x.shape) == 1 else x


def sec_sort_desc(backend: Primitives, keys: Secret, payload: Secret, method: str = "ge") -> tuple[Secret, Secret]:
    """Sort rows descending by key with the payload rows moved alongside.

    keys: (n,) or (n, c) as required by `method`; payload: (n,) or (n, p).
    Returns (sorted keys, sorted payload) in the input shapes.
    """
    if method not in COMPARATORS:
        raise ValueError(f"unknown comparison {method!r}; choose one of {sorted(COMPARATORS)}")
    n_cols, cmp = COMPARATORS[method]
    key_m = _as_matrix(backend, keys)
    pay_m = _as_matrix(backend, payload)
    n = key_m.shape[0]
    if key_m.shape[1] != n_cols:
        raise ValueError(f"method {method!r} needs keys with {n_cols} column(s), got shape {tuple(keys.shape)}")
    if pay_m.shape[0] != n:
        raise ValueError(f"payload has {pay_m.shape[0]} rows, keys have {n}")
    if n <= 1:
        return keys, payload

    rows = backend.cat([key_m, pay_m], dim=1)
    n_pad = 1 << (n - 1).bit_length()
    # slot[p] = storage row at network position p, or -1 for a virtual (−∞) row
    slot = list(range(n)) + [-1] * (n_pad - n)
    for stage in bitonic_stages(n_pad):
        pairs: list[tuple[int, int]] = []
        for hi, lo in stage:
            if slot[hi] >= 0 and slot[lo] >= 0:
                pairs.append((slot[hi], slot[lo]))
            elif slot[hi] < 0 <= slot[lo]:
                slot[hi], slot[lo] = slot[lo], slot[hi]  # public: the real row is larger
        if pairs:
            rows = _compare_exchange(backend, rows, pairs, cmp, n_cols)
    order = torch.tensor(slot[:n], dtype=torch.long)
    rows = backend.index(rows, order)
    out_keys = backend.index(rows, (slice(None), slice(0, n_cols)))
    out_pay = backend.index(rows, (slice(None), slice(n_cols, None)))
    return backend.reshape(out_keys, tuple(keys.shape)), backend.reshape(out_pay, tuple(payload.shape))


def _compare_exchange(
    backend: Primitives, rows: Secret, pairs: list[tuple[int, int]], cmp: Comparator, n_cols: int
) -> Secret:
    """One stage: all (hi, lo) storage-row pairs compared in one call, swapped by one SecSel."""
    n, m = rows.shape[0], len(pairs)
    hi = torch.tensor([p[0] for p in pairs], dtype=torch.long)
    lo = torch.tensor([p[1] for p in pairs], dtype=torch.long)
    a, b = backend.index(rows, hi), backend.index(rows, lo)
    key_cols = (slice(None), slice(0, n_cols))
    bit = cmp(backend, backend.index(a, key_cols), backend.index(b, key_cols))
    width = a.shape[1]
    both = backend.select(backend.reshape(bit, (m, 1)), backend.cat([a, b], dim=1), backend.cat([b, a], dim=1))
    new_hi = backend.index(both, (slice(None), slice(0, width)))
    new_lo = backend.index(both, (slice(None), slice(width, None)))
    gather = torch.arange(n)
    gather[hi] = n + torch.arange(m)
    gather[lo] = n + m + torch.arange(m)
    return backend.index(backend.cat([rows, new_hi, new_lo], dim=0), gather)
