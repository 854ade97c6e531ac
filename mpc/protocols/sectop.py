"""SecTop: the SET of the k largest rows, opened in row order (never the rank order).

Starfish Algorithm 1 sorts the T scored rounds (line 8 SecSrt(L, SecGE2), line 15
SecSrt(L, SecGE); Algorithm 6 lines 8/15 with SecGE4 / SecGE3) and opens the payload of the
top T′ rows (lines 19–22). Only the set is needed, so for up to `PAIRWISE_MAX_ROWS` rows the
order comes from every pairwise comparison at once instead of a sorting network:

    c_ij   = [key_i ≽ key_j]                          for all i < j: ONE comparison call
    rank_i = Σ_{j<i} c_ji + Σ_{j>i} (1 − c_ij)        rows ranked before i (public ±1 matrix · c)
    out_i  = [rank_i ≥ k − ½]                         ONE comparison of n values

Ties go to the lower row. The comparators of `protocols/secsrt.py` compare exact functions of
each row's key (SecGE2/SecGE4 on untruncated products, `Backend.ge_prod`), so c is a total
preorder and the ranks are a permutation of 0 … n − 1: exactly k rows have out_i = 0. The
count Σ out_i is opened first (one value, n − k when the keys are ordered); only then are the
bits opened, which is the set in row order. A count other than n − k means the keys are not
a preorder (a client-reported norm v ≤ 0 makes u·v' ≥ u'·v no order): nothing else is opened
and the rows are sorted instead. Cost: n(n − 1)/2 comparisons in O(1) rounds, against the
network's O(n log² n) comparisons in O(log² n) rounds — the fewer rounds pay on a WAN link
until the pairs' bytes dominate, hence the bound.

Above the bound (or after such a count) the rows are sorted (SecSrt) with their positions as
payload and the top k positions are opened as a set (`open_as_set`).
"""

from __future__ import annotations

import torch

from mpc.primitives import Primitives, Secret
from mpc.protocols.secsrt import COMPARATORS, sec_sort_desc

#: the most rows ranked by all pairwise comparisons (8,128 pairs); more are sorted
PAIRWISE_MAX_ROWS = 128


def sec_top_set(backend: Primitives, keys: Secret, k: int, method: str = "ge") -> tuple[int, ...]:
    """The positions (0-based, increasing) of the k rows with the largest keys.

    keys: (n,) or (n, c) as `method` requires (`protocols/secsrt.py`, `COMPARATORS`).
    """
    if method not in COMPARATORS:
        raise ValueError(f"unknown comparison {method!r}; choose one of {sorted(COMPARATORS)}")
    n = keys.shape[0]
    if not 1 <= k <= n:
        raise ValueError(f"cannot choose {k} of {n} rows")
    if k == n:
        return tuple(range(n))
    if n <= PAIRWISE_MAX_ROWS:
        chosen = _ranked_top(backend, keys, k, method)
        if chosen is not None:
            return chosen
    positions = backend.add(backend.zeros((n,)), torch.arange(n, dtype=torch.float64))
    _, order = sec_sort_desc(backend, keys, positions, method)
    return open_as_set(backend, backend.index(order, slice(0, k)))


def rank_matrix(n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The pairs (i, j), i < j, as index tensors, the public matrix R (n, P) and offsets r0
    (n,) with rank = R·c + r0: R[j, p] = +1 and R[i, p] = −1 for pair p = (i, j), r0_i = n − 1 − i."""
    first, second = torch.triu_indices(n, n, offset=1)
    pairs = first.numel()
    ranks = torch.zeros(n, pairs, dtype=torch.float64)
    columns = torch.arange(pairs)
    ranks[second, columns] = 1.0
    ranks[first, columns] = -1.0
    return first, second, ranks, (n - 1 - torch.arange(n)).to(torch.float64)


def _ranked_top(backend: Primitives, keys: Secret, k: int, method: str) -> tuple[int, ...] | None:
    """The module doc's pairwise ranks; None when the opened count shows the keys unordered."""
    n_cols, cmp = COMPARATORS[method]
    n = keys.shape[0]
    key_m = backend.reshape(keys, (n, 1)) if len(keys.shape) == 1 else keys
    if key_m.shape[1] != n_cols:
        raise ValueError(f"method {method!r} needs keys with {n_cols} column(s), got shape {tuple(keys.shape)}")
    first, second, ranks, offsets = rank_matrix(n)
    c = cmp(backend, backend.index(key_m, first), backend.index(key_m, second))
    rank = backend.add(backend.reshape(backend.matmul(ranks, backend.reshape(c, (-1, 1))), (n,)), offsets)
    out = backend.ge(rank, k - 0.5)
    if round(float(backend.reveal(backend.sum(out)))) != n - k:
        return None
    return tuple(int(i) for i in torch.nonzero(backend.reveal(out) < 0.5).flatten())


def open_as_set(backend: Primitives, indices: Secret) -> tuple[int, ...]:
    """Open secret distinct integers (k,) as a sorted tuple: their order is never revealed.

    The values are first sorted by themselves (SecSrt with SecGE, descending; exact on
    integers), so the opened sequence depends only on the set.
    """
    if indices.shape[0] > 1:
        _, indices = sec_sort_desc(backend, indices, indices, method="ge")
    opened = backend.reveal(backend.reshape(indices, (indices.shape[0],)))
    return tuple(sorted(int(round(float(x))) for x in opened))
