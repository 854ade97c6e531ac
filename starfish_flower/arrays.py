"""Flower `ArrayRecord` ↔ the flat float32 model vector the parties hold, and the
pseudo-gradient a client uploads.

The parties apply M_i = M_{i−1} − η·Σ_j n_j·g_j / Σ_j n_j (FedAvg over gradients). A Flower
ClientApp returns a fitted model M_fit instead of a gradient; uploading the pseudo-gradient

    g = (M_{i−1} − M_fit) / η

makes the parties' update equal Flower's FedAvg of the fitted models,
M_i = Σ_j n_j·M_fit_j / Σ_j n_j (up to the fixed-point encoding: |error| ≤ η·2^−f per
coordinate). The flat order is the ArrayRecord's key order (a torch `state_dict` order).
"""

from __future__ import annotations

import numpy as np
from flwr.app import Array, ArrayRecord


def flatten(record: ArrayRecord) -> np.ndarray:
    """Concatenate the record's arrays (key order, C order) into one float32 vector."""
    parts = []
    for key, array in record.items():
        values = array.numpy()
        if values.dtype.kind != "f":
            raise TypeError(
                f"array {key!r} has dtype {values.dtype}: the parties hold float models only "
                "(keep integer buffers such as BatchNorm counters out of the ArrayRecord)"
            )
        parts.append(np.asarray(values, dtype=np.float32).reshape(-1))
    if not parts:
        raise ValueError("the ArrayRecord holds no array")
    return np.concatenate(parts)


def unflatten(flat: np.ndarray, template: ArrayRecord) -> ArrayRecord:
    """The inverse of `flatten`: a record with `template`'s keys, shapes and dtypes."""
    flat = np.asarray(flat).reshape(-1)
    out, offset = {}, 0
    for key, array in template.items():
        size = int(np.prod(array.shape, dtype=np.int64))
        piece = flat[offset : offset + size]
        if piece.size != size:
            raise ValueError(f"the model has {flat.size} values, the template needs more (at {key!r})")
        out[key] = Array(np.asarray(piece, dtype=np.dtype(array.dtype)).reshape(array.shape))
        offset += size
    if offset != flat.size:
        raise ValueError(f"the model has {flat.size} values, the template {offset}")
    return ArrayRecord(out)


def pseudo_gradient(before: np.ndarray, fitted: np.ndarray, lr: float) -> np.ndarray:
    """g = (M_{i−1} − M_fit) / η in float64 (the SDK encodes it in fixed point)."""
    if not lr > 0:
        raise ValueError(f"the learning rate must be positive, got {lr}")
    if before.shape != fitted.shape:
        raise ValueError(f"the fitted model has {fitted.size} values, the global model {before.size}")
    return (before.astype(np.float64) - fitted.astype(np.float64)) / lr
