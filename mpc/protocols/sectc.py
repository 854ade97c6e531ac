"""SecTC: secure threshold checking (Starfish Algorithm 3; docs/ALGORITHM.md §4).

For each remaining client j with estimated gradient ĝ^j (m coordinates) and threshold
δ^j ≥ 0 (Algorithm 3):
    line 4  e(k) = [ĝ(k)² > (δ^j)²]   (squares instead of |·|: both sides non-negative)
    line 5  e = Σ_k e(k)               (local additions)
    line 7  f = SecGE(e, 1)            (one final comparison per client)
    line 8  f revealed                 (the only output)
All clients' coordinates go into ONE comparison call (`Primitives.ge_prod`, which the CrypTen
backend evaluates on the untruncated products ĝ̄², δ̄², so the per-coordinate bit is exact
on the fixed-point grid even for |ĝ| ≈ 10⁻³ whose truncated square would underflow), and
all clients' final comparisons into one more call.

Optional sample-first pass (docs/ALGORITHM.md §4): given a PUBLIC set of coordinate indices both
parties agreed on, check those first; clients whose sample already fires are flagged and
skipped; only the others are checked on the remaining coordinates. Because flags almost
always fire, this usually avoids the full pass. It reveals one extra bit per client:
whether its flag was decided by the sample.
"""

from __future__ import annotations

import torch

from mpc.primitives import Primitives, Secret


def sec_tc(backend: Primitives, g: Secret, delta: Secret, sample: torch.Tensor | None = None) -> torch.Tensor:
    """Public bool flags (n,): f_j = 1 iff some |g[j, k]| > delta[j]."""
    if len(g.shape) != 2 or tuple(delta.shape) != (g.shape[0],):
        raise ValueError(f"expected g (n, m) and delta (n,), got {tuple(g.shape)} and {tuple(delta.shape)}")
    if sample is None:
        return _flags(backend, g, delta)
    sample = torch.as_tensor(sample, dtype=torch.long).unique()
    if sample.numel() == 0 or sample.min() < 0 or sample.max() >= g.shape[1]:
        raise ValueError("sample indices must be a non-empty subset of range(m)")
    first = _flags(backend, backend.index(g, (slice(None), sample)), delta)
    rest_idx = torch.ones(g.shape[1], dtype=torch.bool)
    rest_idx[sample] = False
    pending = torch.nonzero(~first).flatten()
    if pending.numel() == 0 or not rest_idx.any():
        return first
    rest_cols = torch.nonzero(rest_idx).flatten()
    g_rest = backend.index(backend.index(g, pending), (slice(None), rest_cols))
    second = _flags(backend, g_rest, backend.index(delta, pending))
    flags = first.clone()
    flags[pending] = second
    return flags


def _flags(backend: Primitives, g: Secret, delta: Secret) -> torch.Tensor:
    """Algorithm 3 lines 4–8 for all clients at once."""
    n = g.shape[0]
    d_col = backend.reshape(delta, (n, 1))
    within = backend.ge_prod(d_col, d_col, g, g)  # [δ² ≥ g(k)²] = 1 − e(k)
    exceed_count = backend.neg(backend.sub(backend.sum(within, dim=1), float(g.shape[1])))  # e = Σ_k e(k)
    flag = backend.ge(exceed_count, 1.0)
    return backend.reveal(flag) > 0.5
