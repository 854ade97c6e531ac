"""Client-side statistics uploaded (secret-shared) with each gradient
(docs/SERVICE.md, "What a client uploads").

* ‖g‖: the L2 norm (used by SecRS's cosine denominator);
* δ: the tolerance-rate threshold — with α the tolerance rate and m coordinates,
  δ is the (⌊α·m⌋+1)-th largest |g(k)|, so that ⌊α·m⌋ coordinates (a fraction α, up to
  ties) exceed it. SecTC flags a client whose estimate has any |ĝ(k)| > δ (Algorithm 3).
"""

from __future__ import annotations

import math

import numpy as np


def l2_norm(gradient: np.ndarray) -> float:
    """‖g‖ = sqrt(Σ_k g(k)²) in float64. Summed by numpy's own loop (einsum), not a BLAS dot:
    a BLAS call wakes its thread pool, which costs ~10× the sum itself and, with many clients
    in one process, makes their threads wait on each other."""
    g = np.asarray(gradient, dtype=np.float64).reshape(-1)
    return math.sqrt(float(np.einsum("i,i->", g, g)))


def clip_to_norm(gradient: np.ndarray, clip: float) -> np.ndarray:
    """g·min(1, C/‖g‖): the client-side clipping of Stage I under the operator's DP setting
    (docs/PRIVACY.md, "Differential privacy"); the norm and δ are then those of the clipped g."""
    if not np.isfinite(clip) or clip <= 0:
        raise ValueError(f"clipping norm must be finite and > 0, got {clip!r}")
    norm = l2_norm(gradient)
    if norm <= clip:
        return gradient
    # the factor 1 − 2^-20 absorbs the rounding of a float32 result, so ‖result‖ ≤ C exactly
    scale = clip / norm * (1.0 - 2.0**-20)
    return (np.asarray(gradient, dtype=np.float64) * scale).astype(np.asarray(gradient).dtype)


def tolerance_threshold(gradient: np.ndarray, alpha: float) -> float:
    """δ with #{k : |g(k)| > δ} = ⌊α·m⌋ (absent ties); 0 when ⌊α·m⌋ = m."""
    if not 0.0 < alpha <= 1.0:
        raise ValueError(f"tolerance rate alpha must be in (0, 1], got {alpha}")
    mags = np.abs(np.asarray(gradient, dtype=np.float64).reshape(-1))  # a fresh array: partitioned in place
    m = mags.size
    if m == 0:
        raise ValueError("gradient is empty")
    k = int(np.floor(alpha * m))
    if k >= m:
        return 0.0
    # the (k+1)-th largest = element m-1-k of the ascending order
    mags.partition(m - 1 - k)
    return float(mags[m - 1 - k])
