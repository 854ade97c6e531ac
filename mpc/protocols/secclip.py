"""SecClip: clip secret vectors to L2 norm C inside 2PC; no norm is revealed.

For each row x of an (n, m) secret (or one (m,) vector), with r = ‖x‖²/C²:

    x' = x · min(1, C/‖x‖) = x · s · u,   s = 2^(−j),   u = 1/√(r·4^(−j)),

where j is the number of ladder steps 4^k ≤ r (k = 0..K). The steps are:

1. ‖x‖² by SecSP (one secret product), r = ‖x‖²/C² (public scaling);
2. the ladder b_k = [r·4^(−k) ≥ 1], k = 0..K, by ONE batched SecGE; the candidates
   c_k = r·4^(−k) are local public scalings. b is monotone, so e_k = b_k − b_(k+1) is the
   one-hot indicator of j (e_K = b_K) and, with a = 1 − b_0 (no clipping needed),
   r̃ = Σ_k e_k·c_k + a ∈ [1, 4)   and   s = Σ_k e_k·2^(−k) + a   (one SecMul with bits);
3. u = 1/√(r̃·(1+2κ)) by the square root and SecDiv (r̃ inside their documented range),
   where the margin κ (see `clip_margin`) makes u a LOWER bound of the exact value despite
   fixed-point error, so the clipped norm never exceeds C (for differential privacy an
   over-clipped vector is harmless, an under-clipped one is not);
4. x' = (x·s)·u, two secret products broadcast over the row (each truncated once).

Range reduction by the ladder keeps r̃ in [1, 4) for every ‖x‖ ≤ C·2^K; K is derived from
the documented range ‖x‖² ≤ 2^24 (`ladder_steps`); a row with ‖x‖ > C·2^f has s below one ulp and
is zeroed (over-clipped, still within the bound). When no clipping is needed (b_0 = 0), s = 1
and r̃ = 1, so u ≈ (1+2κ)^(−1/2): unclipped rows are scaled by 1 − κ at most.
Revealed: nothing. Comparisons: n·(K+1) SecGE; products: 4 (+ those of √ and SecDiv).
"""

from __future__ import annotations

import math

import torch

from mpc.primitives import Primitives, Secret

MAX_SQUARED_NORM = float(2**24)
"""The documented range ‖x‖² ≤ 2^24 (‖x‖ ≤ 4096): SecSP's one truncation of ‖x‖²·2^(2f) faults
with probability ≈ ‖x‖²·2^(2f−64) ≤ 2^−8 per row there (docs/NUMERICS.md); larger rows are
outside every legitimate gradient norm of this project."""
FIXED_POINT_ULP = 2.0**-16


def ladder_steps(clip: float) -> int:
    """K with C²·4^(K+1) ≥ MAX_SQUARED_NORM: the ladder covers every representable ‖x‖."""
    if not math.isfinite(clip) or clip <= 0:
        raise ValueError(f"clipping norm must be finite and > 0, got {clip!r}")
    return max(1, math.ceil(math.log(MAX_SQUARED_NORM / clip**2, 4)))


def clip_margin(clip: float, length: int) -> float:
    """κ = 2^(−10) + 4·√m·ulp/C: covers SecDiv/√ relative error (< 2^(−12)) and the per-coordinate
    truncation of x·s·u (≤ 2 ulp each, i.e. ≤ 2√m·ulp in norm)."""
    return 2.0**-10 + 4.0 * math.sqrt(max(length, 1)) * FIXED_POINT_ULP / clip


def sec_clip(backend: Primitives, x: Secret, clip: float) -> Secret:
    """SecClip: x · min(1, C/‖x‖) row-wise for x of shape (n, m) or (m,) (module docstring)."""
    single = len(x.shape) == 1
    rows = backend.reshape(x, (1, x.shape[0])) if single else x
    n, m = rows.shape[0], rows.shape[1]
    steps = ladder_steps(clip)
    ratio = backend.mul(backend.dot(rows, rows), 1.0 / clip**2)  # r, (n,)
    candidates = [ratio]
    for _ in range(steps):
        candidates.append(backend.mul(candidates[-1], 0.25))  # c_k = r·4^(−k), local
    ladder = backend.stack(candidates, dim=1)  # (n, K+1)
    bits = backend.ge(ladder, 1.0)
    shifted = backend.cat([backend.index(bits, (slice(None), slice(1, None))), backend.zeros((n, 1))], 1)
    one_hot = backend.sub(bits, shifted)  # e_k = b_k − b_(k+1)
    unclipped = backend.neg(backend.sub(backend.index(bits, (slice(None), 0)), 1.0))  # a = 1 − b_0
    powers = torch.tensor([2.0**-k for k in range(steps + 1)], dtype=torch.float64)
    reduced = backend.add(backend.sum(backend.mul(one_hot, ladder), dim=1), unclipped)  # r̃
    halving = backend.add(backend.matmul(one_hot, powers), unclipped)  # s
    kappa = clip_margin(clip, m)
    root = backend.sqrt(backend.mul(reduced, 1.0 + 2.0 * kappa))
    inverse = backend.div(backend.add(backend.zeros((n,)), 1.0), root)  # u
    column = (n, 1)
    clipped = backend.mul(backend.mul(rows, backend.reshape(halving, column)), backend.reshape(inverse, column))
    return backend.reshape(clipped, (m,)) if single else clipped
