"""Fixed-point codec and additive secret sharing over Z_2^64 (numpy only).

Importable without torch or CrypTen: the client SDK uses it to share gradients.

Encoding (CrypTen's): x̄ = round(x · 2^f) as int64, arithmetic wraps mod 2^64.
Sharing (docs/SERVICE.md, "What a client uploads"): r ← CSPRNG (os.urandom), share0 = x̄ − r, share1 = r (mod 2^64);
reconstruct x̄ = share0 + share1 (mod 2^64). Decoding divides the signed int64 by 2^f
in float64 — exact for negatives (CrypTen's `get_plain_text` is not; do not use it).
"""

from __future__ import annotations

import math
import os

import numpy as np

DEFAULT_PRECISION_BITS = 16
"""f: fractional bits. Chosen by the precision study (docs/RESULTS.md)."""

MAX_ABS_DEFAULT = float(2**20)
"""Default largest |x| accepted for encoding: leaves 64 − 1 − f − 20 bits of headroom
for sums and products (see docs/NUMERICS.md)."""


class EncodingError(ValueError):
    """A value cannot be encoded: wrong dtype, non-finite, or out of range."""


def _check_precision(precision: int) -> None:
    if not isinstance(precision, int) or not 0 <= precision <= 40:
        raise EncodingError(f"precision must be an int in [0, 40], got {precision!r}")


def encode(x: np.ndarray, precision: int = DEFAULT_PRECISION_BITS, max_abs: float = MAX_ABS_DEFAULT) -> np.ndarray:
    """x̄ = round(x · 2^f) as int64, after checking dtype, finiteness and |x| ≤ max_abs."""
    _check_precision(precision)
    arr = np.asarray(x)
    if arr.dtype.kind != "f":
        raise EncodingError(f"expected a floating-point array, got dtype {arr.dtype}")
    arr = arr.astype(np.float64, copy=False)
    if arr.size:
        hi, lo = float(np.max(arr)), float(np.min(arr))  # NaN propagates to both; no temporaries
        if not (math.isfinite(hi) and math.isfinite(lo)):
            bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
            raise EncodingError(f"{bad} non-finite value(s) (NaN or inf) cannot be encoded")
        peak = max(hi, -lo)
        if peak > max_abs:
            raise EncodingError(f"value {peak:.6g} exceeds the encodable range |x| <= {max_abs:.6g}")
    return np.rint(arr * float(2**precision)).astype(np.int64)


def decode(encoded: np.ndarray, precision: int = DEFAULT_PRECISION_BITS) -> np.ndarray:
    """x = x̄ / 2^f in float64 (signed int64 interpretation, exact for negatives)."""
    _check_precision(precision)
    arr = np.asarray(encoded)
    if arr.dtype != np.int64:
        raise EncodingError(f"expected int64 ring elements, got dtype {arr.dtype}")
    return arr.astype(np.float64) / float(2**precision)


def random_ring(shape: tuple[int, ...] | int) -> np.ndarray:
    """Uniform elements of Z_2^64 as int64, from the OS CSPRNG (os.urandom)."""
    shape_t = (shape,) if isinstance(shape, int) else tuple(shape)
    count = int(np.prod(shape_t, dtype=np.int64)) if shape_t else 1
    return np.frombuffer(os.urandom(8 * count), dtype="<i8").astype(np.int64).reshape(shape_t)


def share_encoded(encoded: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Split x̄ into (x̄ − r, r) mod 2^64 with r uniform from the CSPRNG."""
    arr = np.asarray(encoded)
    if arr.dtype != np.int64:
        raise EncodingError(f"expected int64 ring elements, got dtype {arr.dtype}")
    mask = random_ring(arr.shape)
    with np.errstate(over="ignore"):
        share0 = arr - mask  # int64 arithmetic wraps mod 2^64
    return share0, mask


def share(
    x: np.ndarray, precision: int = DEFAULT_PRECISION_BITS, max_abs: float = MAX_ABS_DEFAULT
) -> tuple[np.ndarray, np.ndarray]:
    """Encode then share: returns (share for party 0, share for party 1)."""
    return share_encoded(encode(x, precision, max_abs))


def reconstruct_encoded(share0: np.ndarray, share1: np.ndarray) -> np.ndarray:
    """x̄ = share0 + share1 mod 2^64; shapes and dtypes must match."""
    a, b = np.asarray(share0), np.asarray(share1)
    if a.dtype != np.int64 or b.dtype != np.int64:
        raise EncodingError(f"shares must be int64, got {a.dtype} and {b.dtype}")
    if a.shape != b.shape:
        raise EncodingError(f"share shapes differ: {a.shape} vs {b.shape}")
    with np.errstate(over="ignore"):
        return a + b


def reconstruct(share0: np.ndarray, share1: np.ndarray, precision: int = DEFAULT_PRECISION_BITS) -> np.ndarray:
    """Reconstruct and decode to float64."""
    return decode(reconstruct_encoded(share0, share1), precision)


def to_wire(arr: np.ndarray) -> bytes:
    """Raw little-endian int64 bytes (the wire and on-disk format of a share)."""
    a = np.asarray(arr)
    if a.dtype != np.int64:
        raise EncodingError(f"shares must be int64, got {a.dtype}")
    return a.astype("<i8", copy=False).tobytes()


def from_wire(data: bytes, shape: tuple[int, ...]) -> np.ndarray:
    """Parse raw little-endian int64 bytes, checking the length against `shape`."""
    expected = 8 * int(np.prod(shape, dtype=np.int64)) if shape else 8
    if len(data) != expected:
        raise EncodingError(f"share has {len(data)} bytes, expected {expected} for shape {tuple(shape)}")
    return np.frombuffer(data, dtype="<i8").astype(np.int64).reshape(shape)
