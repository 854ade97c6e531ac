"""Content hash of a public global model (numpy only, importable by the server and SDK).

A model is a flat float32 vector plus an architecture name (DESIGN §4). Its hash is

    sha256( utf8(architecture) ‖ 0x00 ‖ little-endian float32 bytes of the vector )

as lowercase hex. The NUL separator keeps (name, bytes) pairs unambiguous. Both parties
compute it after committing M_i; the client SDK compares the two parties' hashes before
training on a model.
"""

from __future__ import annotations

import hashlib

import numpy as np


def model_bytes(vector: np.ndarray) -> bytes:
    """The canonical byte encoding of a flat model: little-endian float32."""
    arr = np.asarray(vector)
    if arr.ndim != 1:
        raise ValueError(f"a model is a flat vector; got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError("model contains non-finite values")
    return np.ascontiguousarray(arr, dtype="<f4").tobytes()


def model_hash(vector: np.ndarray, architecture: str) -> str:
    """sha256 hex digest of (architecture, float32 vector); see the module docstring."""
    if not architecture or "\x00" in architecture:
        raise ValueError("architecture name must be a non-empty string without NUL")
    digest = hashlib.sha256()
    digest.update(architecture.encode("utf-8"))
    digest.update(b"\x00")
    digest.update(model_bytes(vector))
    return digest.hexdigest()
