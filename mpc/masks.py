"""Seed-compressed mask shares (an optional transport/storage form of share1 = r).

Additive sharing x̄ = (x̄ − r) + r needs r uniform in Z_2^64. Instead of drawing r
from os.urandom and sending it (8 bytes per coordinate), the client draws a 32-byte
seed s from os.urandom and sets r = SHAKE-256(s) read as little-endian int64; it sends
s to one party and x̄ − r to the other (the SDK spreads the roles over clients and rounds).
The party holding s expands r whenever it needs its share. Secure under the standard
assumption that SHAKE-256 is a pseudorandom generator; it halves client uploads and
the bytes the parties store (32 bytes instead of 8·m for the seeded share).
"""

from __future__ import annotations

import hashlib
import os

import numpy as np

SEED_BYTES = 32
DOMAIN = b"starfish-mask-v1\x00"


def new_seed() -> bytes:
    return os.urandom(SEED_BYTES)


def expand_mask(seed: bytes, count: int) -> np.ndarray:
    """r = SHAKE-256(domain ‖ seed), `count` little-endian int64 ring elements."""
    if len(seed) != SEED_BYTES:
        raise ValueError(f"mask seed must be {SEED_BYTES} bytes, got {len(seed)}")
    data = hashlib.shake_256(DOMAIN + seed).digest(8 * count)
    return np.frombuffer(data, dtype="<i8").astype(np.int64)


def seeded_share(encoded: np.ndarray) -> tuple[np.ndarray, bytes]:
    """(x̄ − r, seed) with r = expand_mask(seed): one party's share in full, the other's as a seed."""
    arr = np.asarray(encoded)
    if arr.dtype != np.int64:
        raise ValueError(f"expected int64 ring elements, got dtype {arr.dtype}")
    seed = new_seed()
    with np.errstate(over="ignore"):
        return arr.reshape(-1) - expand_mask(seed, arr.size), seed
