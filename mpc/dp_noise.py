"""Gaussian noise for differentially private reveals, from cryptographic randomness.

Each sample is Box–Muller on two uniforms of 53 bits:

    u₁, u₂ ∈ (0, 1],   z = √(−2 ln u₁) · cos(2π u₂) ~ N(0, 1),   noise = σ·z.

Two sources of the uniforms:

* `csprng_gaussian` reads them from `os.urandom` (the operating system's CSPRNG): no
  seeded generator state exists that an observer of earlier outputs could predict. Used
  by `Backend.reveal_noised` (Stage II): the plaintext backend adds σ·z to the value;
  under 2PC each party adds its own σ·z to its share before opening.
* `keyed_gaussian` expands a 32-byte key with AES-256-CTR (`mpc.plane.prg.Prg`): the same
  key gives the same noise, so a party that must send the same noised share again (a
  retried Stage I exchange) does not publish a second, independent draw. The key is
  derived from a party secret that never leaves the party (`server.stage1_dp`).

Floating-point artefacts of Box–Muller sampling are not defended against (the documented
limitation of textbook Gaussian mechanisms; docs/PRIVACY.md).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

import numpy as np
import torch

from mpc.plane.prg import Prg

_MANTISSA_BITS = 53


def _count(shape: Sequence[int]) -> int:
    return int(np.prod(tuple(shape), dtype=np.int64)) if len(shape) else 1


def _check_sigma(sigma: float) -> None:
    if not math.isfinite(sigma) or sigma < 0:
        raise ValueError(f"noise standard deviation must be finite and >= 0, got {sigma!r}")


def _box_muller(words: np.ndarray, shape: Sequence[int], sigma: float) -> torch.Tensor:
    """σ·z from 2·count uniform 53-bit words (the module docstring's formula)."""
    uniform = (words.astype(np.float64) + 1.0) / float(2**_MANTISSA_BITS)  # (0, 1]
    u1, u2 = np.split(uniform, 2)
    z = np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * math.pi * u2)
    return torch.from_numpy(sigma * z).reshape(tuple(shape))


def csprng_gaussian(shape: Sequence[int], sigma: float) -> torch.Tensor:
    """N(0, σ²) samples of `shape` (float64) from os.urandom."""
    _check_sigma(sigma)
    count = _count(shape)
    if sigma == 0.0 or count == 0:
        return torch.zeros(tuple(shape), dtype=torch.float64)
    words = np.frombuffer(os.urandom(16 * count), dtype=np.uint64) >> np.uint64(64 - _MANTISSA_BITS)
    return _box_muller(words, shape, sigma)


def keyed_gaussian(key: bytes, shape: Sequence[int], sigma: float) -> torch.Tensor:
    """N(0, σ²) samples of `shape` (float64) from AES-256-CTR under `key` (deterministic per key)."""
    _check_sigma(sigma)
    count = _count(shape)
    if sigma == 0.0 or count == 0:
        return torch.zeros(tuple(shape), dtype=torch.float64)
    words = Prg(key).bits((2 * count,), _MANTISSA_BITS).numpy()
    return _box_muller(words, shape, sigma)


def party_gaussian(shape: Sequence[int], sigma: float, key: bytes | None = None) -> torch.Tensor:
    """A party's noise for `Backend.reveal_noised`: keyed by `key` when given (a repeated
    opening repeats the draw), else from the OS CSPRNG."""
    return csprng_gaussian(shape, sigma) if key is None else keyed_gaussian(key, shape, sigma)
