"""SecTC: secure threshold checking (Starfish Algorithm 3; docs/ALGORITHM.md §4).

For each remaining client j with estimated gradient ĝ^j (m coordinates) and threshold
δ^j ≥ 0 (Algorithm 3):
    line 4  e(k) = [ĝ(k)² > (δ^j)²]   (squares instead of |·|: both sides non-negative)
    line 5  e = Σ_k e(k)               (local additions)
    line 7  f = SecGE(e, 1)            (one final comparison per client)
    line 8  f revealed                 (the only output)
All clients' coordinates of a column block go into ONE comparison call (`Primitives.ge_prod`,
which the CrypTen backend evaluates on the untruncated products ĝ̄², δ̄², so the per-coordinate
bit is exact on the fixed-point grid even for |ĝ| ≈ 10⁻³ whose truncated square would
underflow), and all clients' final comparisons into one more call. The blocks hold at most
`BLOCK_ELEMENTS` coordinates (n clients × a column range) and their counts e are summed in
shares, so the comparison's temporaries are bounded by one block whatever n·m is; the bits
are exact, so the flags do not depend on the blocking.

Optional sample-first pass (docs/ALGORITHM.md §4): given a PUBLIC set of coordinate indices both
parties agreed on, check those first; clients whose sample already fires are flagged and
skipped; only the others are checked on the remaining coordinates. Because flags almost
always fire, this usually avoids the full pass. It reveals one extra bit per client:
whether its flag was decided by the sample.
"""

from __future__ import annotations

import torch

from mpc.primitives import Primitives, Secret

BLOCK_ELEMENTS = 1 << 20
"""Coordinates compared in one call (n rows × a column range): bounds the comparison's memory."""


def sec_tc(backend: Primitives, g: Secret, delta: Secret, sample: torch.Tensor | None = None) -> torch.Tensor:
    """Public bool flags (n,): f_j = 1 iff some |g[j, k]| > delta[j]."""
    if len(g.shape) != 2 or tuple(delta.shape) != (g.shape[0],):
        raise ValueError(f"expected g (n, m) and delta (n,), got {tuple(g.shape)} and {tuple(delta.shape)}")
    if sample is None:
        return _flags(backend, g, delta)
    sample = torch.as_tensor(sample, dtype=torch.long).unique()
    if sample.numel() == 0 or sample.min() < 0 or sample.max() >= g.shape[1]:
        raise ValueError("sample indices must be a non-empty subset of range(m)")
    first = _flags(backend, g, delta, sample)
    rest_idx = torch.ones(g.shape[1], dtype=torch.bool)
    rest_idx[sample] = False
    pending = torch.nonzero(~first).flatten()
    if pending.numel() == 0 or not rest_idx.any():
        return first
    rest_cols = torch.nonzero(rest_idx).flatten()
    second = _flags(backend, g, backend.index(delta, pending), rest_cols, pending)
    flags = first.clone()
    flags[pending] = second
    return flags


def _flags(
    backend: Primitives,
    g: Secret,
    delta: Secret,
    cols: torch.Tensor | None = None,
    rows: torch.Tensor | None = None,
) -> torch.Tensor:
    """Algorithm 3 lines 4–8 for the clients `rows` (all: None) on the coordinates `cols`
    (all: None), one column block of at most `BLOCK_ELEMENTS` coordinates at a time."""
    n = g.shape[0] if rows is None else rows.numel()
    width = g.shape[1] if cols is None else cols.numel()
    d_col = backend.reshape(delta, (n, 1))
    step = max(1, BLOCK_ELEMENTS // max(n, 1))
    count: Secret | None = None
    for start in range(0, width, step):
        block = backend.index(g, _block_key(start, min(start + step, width), cols, rows))
        within = backend.ge_prod(d_col, d_col, block, block)  # [δ² ≥ g(k)²] = 1 − e(k)
        part = backend.sum(within, dim=1)
        count = part if count is None else backend.add(count, part)
    assert count is not None  # width ≥ 1
    exceed_count = backend.neg(backend.sub(count, float(width)))  # e = Σ_k e(k)
    flag = backend.ge(exceed_count, 1.0)
    return backend.reveal(flag) > 0.5


def _block_key(start: int, stop: int, cols: torch.Tensor | None, rows: torch.Tensor | None) -> tuple:
    """The index of rows × columns start..stop (positions in `cols` when given)."""
    picked = slice(start, stop) if cols is None else cols[start:stop]
    if rows is None:
        return (slice(None), picked)
    if isinstance(picked, slice):
        picked = torch.arange(start, stop)
    return (rows.reshape(-1, 1), picked.reshape(1, -1))
