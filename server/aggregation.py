"""Stage I aggregation on shares (DESIGN §5; FedAvg).

Each party computes its share of A = Σ_{j∈S} n_j·[g_j] locally with integer weights
(wrapping int64 arithmetic, no truncation). After the exchange both parties hold
A = A_0 + A_1 (mod 2^64) = Σ n_j·ḡ_j, and both compute, identically,

    G = decode(A) / Σ_{j∈S} n_j,        M_i = M_{i−1} − η_l · G

in float64, rounded to float32. Deterministic numpy code, so the two parties get
bit-identical models; their hashes are compared before commit.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from mpc.fixedpoint import decode, reconstruct_encoded
from server.store import Store


LOAD_THREADS = 2  #: shares are read (and seed-compressed ones expanded) concurrently; hashing releases the GIL


def local_aggregate(store: Store, round_index: int, members: dict[str, int], num_params: int) -> np.ndarray:
    """This party's share of Σ_j n_j·[g_j] over the agreed members (int64, wraps mod 2^64)."""
    acc = np.zeros(num_params, dtype=np.int64)
    clients = sorted(members)
    with ThreadPoolExecutor(LOAD_THREADS) as pool, np.errstate(over="ignore"):
        for client, bundle in zip(clients, pool.map(lambda c: store.load_share(round_index, c), clients)):
            if bundle.n_samples != members[client]:
                raise ValueError(f"client {client!r}: stored n_j {bundle.n_samples} differs from agreed {members[client]}")
            if bundle.gradient.size != num_params:
                raise ValueError(f"client {client!r}: share has {bundle.gradient.size} entries, model has {num_params}")
            acc += np.int64(members[client]) * bundle.gradient
    return acc


def fedavg_update(previous: np.ndarray, share0: np.ndarray, share1: np.ndarray, total_samples: int,
                  lr: float, precision_bits: int) -> np.ndarray:
    """M_i = M_{i−1} − η_l · decode(A_0 + A_1) / Σ n_j, as float32."""
    if total_samples <= 0:
        raise ValueError("the agreed membership has no samples")
    weighted_sum = decode(reconstruct_encoded(share0, share1), precision_bits)
    update = previous.astype(np.float64) - float(lr) * (weighted_sum / float(total_samples))
    return update.astype(np.float32)
