"""What a client uploads besides its gradient (DESIGN §4), numpy only.

For round i client j sends g_i^j, its L2 norm ‖g_i^j‖ and the tolerance-rate threshold
δ_i^j: the value such that a fraction α of the |g_i^j| coordinates exceed it
(Starfish §IV, threshold determination; α is the tolerance rate, paper default 0.4).
"""

from __future__ import annotations

import math

import numpy as np


def gradient_norm(g: np.ndarray) -> float:
    """‖g‖₂, accumulated in float64."""
    return float(np.linalg.norm(np.asarray(g, dtype=np.float64).ravel()))


def tolerance_threshold(g: np.ndarray, alpha: float) -> float:
    """δ such that exactly ⌊α·m⌋ coordinates satisfy |g(k)| > δ when |g| has no ties.

    With |g| sorted in descending order as a_0 ≥ a_1 ≥ … ≥ a_{m−1} and k = ⌊α·m⌋,
    δ = a_k: the k largest magnitudes lie strictly above it (ties at a_k excepted).
    """
    if not 0.0 <= alpha < 1.0:
        raise ValueError(f"tolerance rate α must lie in [0, 1); got {alpha}")
    a = np.abs(np.asarray(g, dtype=np.float64).ravel())
    if a.size == 0:
        raise ValueError("empty gradient")
    k = math.floor(alpha * a.size)
    # the (m−1−k)-th order statistic in ascending order is a_k in descending order
    return float(np.partition(a, a.size - 1 - k)[a.size - 1 - k])
