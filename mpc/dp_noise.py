"""Gaussian noise for differentially private reveals, drawn from the OS CSPRNG.

Each sample is Box–Muller on two uniforms of 53 bits read from `os.urandom` (the
operating system's cryptographically secure generator), so no seeded PRNG state exists
that an observer of earlier outputs could predict:

    u₁, u₂ ∈ (0, 1],   z = √(−2 ln u₁) · cos(2π u₂) ~ N(0, 1),   noise = σ·z.

Used by `Backend.reveal_noised`: the plaintext backend adds σ·z to the value; under 2PC
each party adds its own σ·z to its share before opening (docs/PRIVACY.md, "Differential
privacy"). Floating-point artefacts of Box–Muller sampling are not defended against
(the documented limitation of textbook Gaussian mechanisms).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

import numpy as np
import torch

_MANTISSA_BITS = 53


def _uniform_open_closed(count: int) -> np.ndarray:
    """`count` uniforms in (0, 1] with 53 random bits each, from os.urandom."""
    words = np.frombuffer(os.urandom(8 * count), dtype=np.uint64) >> np.uint64(64 - _MANTISSA_BITS)
    return (words.astype(np.float64) + 1.0) / float(2**_MANTISSA_BITS)


def csprng_gaussian(shape: Sequence[int], sigma: float) -> torch.Tensor:
    """N(0, σ²) samples of `shape` (float64) from the OS CSPRNG (module docstring)."""
    if not math.isfinite(sigma) or sigma < 0:
        raise ValueError(f"noise standard deviation must be finite and >= 0, got {sigma!r}")
    count = int(np.prod(tuple(shape), dtype=np.int64)) if len(shape) else 1
    if sigma == 0.0 or count == 0:
        return torch.zeros(tuple(shape), dtype=torch.float64)
    u1, u2 = _uniform_open_closed(count), _uniform_open_closed(count)
    z = np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * math.pi * u2)
    return torch.from_numpy(sigma * z).reshape(tuple(shape))
