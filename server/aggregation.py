"""Stage I aggregation on shares (FedAvg; docs/SERVICE.md, "Round protocol").

Each party computes its share of A = Σ_{j∈S} w_j·[g_j] locally with integer weights
(wrapping int64 arithmetic, no truncation). After the exchange both parties hold
A = A_0 + A_1 (mod 2^64) = Σ w_j·ḡ_j, and both compute, identically,

    G = decode(A) / Σ_{j∈S} w_j,        M_i = M_{i−1} − η_l · G

with w_j the capped weights of the cohort (unlearning.weight_cap: w_j = n_j unless one
principal would hold more than 1/k of the round's weight; integers, w_j ≤ n_j), in float64,
rounded to float32. Deterministic numpy code, so the two parties get
bit-identical models; their hashes are compared before commit.

`RunningSums` keeps, per open round, Σ n_j·[g_j] over the uploads accepted so far, added
as each upload is acknowledged, so the sum is ready when the round closes: the agreed S
then only needs the uploads outside S subtracted and those missing (e.g. accepted
before a restart) read from the store.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from mpc.fixedpoint import decode, reconstruct_encoded
from server.store import Store

LOAD_THREADS = 2  #: shares are read (and seed-compressed ones expanded) concurrently; hashing releases the GIL


class RunningSums:
    """Per round: (Σ n_j·[g_j] over the uploads added so far, their weights n_j)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sums: dict[int, tuple[np.ndarray, dict[str, int]]] = {}

    def add(self, round_index: int, client: str, n_samples: int, share: np.ndarray) -> None:
        """Add an acknowledged upload (once per client and round); drops older rounds."""
        with self._lock:
            for old in [r for r in self._sums if r < round_index]:
                del self._sums[old]
            acc, weights = self._sums.setdefault(round_index, (np.zeros(share.size, dtype=np.int64), {}))
            if client in weights or acc.size != share.size:
                return
            with np.errstate(over="ignore"):
                acc += np.int64(n_samples) * share
            weights[client] = int(n_samples)

    def snapshot(self, round_index: int) -> tuple[np.ndarray, dict[str, int]] | None:
        with self._lock:
            entry = self._sums.get(round_index)
            return None if entry is None else (entry[0].copy(), dict(entry[1]))


def _weighted_sum(
    store: Store, round_index: int, weights: dict[str, int], num_params: int, samples: dict[str, int] | None = None
) -> np.ndarray:
    """Σ w_j·[g_j] over `weights`, read from the store (the stored n_j checked against `samples`,
    by default the weights themselves)."""
    samples = weights if samples is None else samples
    acc = np.zeros(num_params, dtype=np.int64)
    clients = sorted(weights)
    with ThreadPoolExecutor(LOAD_THREADS) as pool, np.errstate(over="ignore"):
        for client, bundle in zip(clients, pool.map(lambda c: store.load_share(round_index, c), clients), strict=True):
            if bundle.n_samples != samples[client]:
                raise ValueError(
                    f"client {client!r}: stored n_j {bundle.n_samples} differs from agreed {samples[client]}"
                )
            if bundle.gradient.size != num_params:
                raise ValueError(f"client {client!r}: share has {bundle.gradient.size} entries, model has {num_params}")
            acc += np.int64(weights[client]) * bundle.gradient
    return acc


def local_aggregate(
    store: Store,
    round_index: int,
    members: dict[str, int],
    num_params: int,
    running: RunningSums | None = None,
    weights: dict[str, int] | None = None,
) -> np.ndarray:
    """This party's share of Σ_{j∈S} w_j·[g_j] over the agreed members S (int64, wraps mod 2^64),
    w_j the capped weights (unlearning.weight_cap; default n_j): when no weight was capped, the
    running sum minus the uploads outside S, plus those of S it does not hold; else from the store."""
    if weights is not None and weights != members:
        return _weighted_sum(store, round_index, weights, num_params, samples=members)
    snap = running.snapshot(round_index) if running is not None else None
    if snap is None or snap[0].size != num_params:
        return _weighted_sum(store, round_index, members, num_params)
    acc, added = snap
    if any(added[c] != members[c] for c in members if c in added):
        return _weighted_sum(store, round_index, members, num_params)
    extra = {c: n for c, n in added.items() if c not in members}
    missing = {c: n for c, n in members.items() if c not in added}
    with np.errstate(over="ignore"):
        if extra:
            acc -= _weighted_sum(store, round_index, extra, num_params)
        if missing:
            acc += _weighted_sum(store, round_index, missing, num_params)
    return acc


def fedavg_update(
    previous: np.ndarray, share0: np.ndarray, share1: np.ndarray, total_samples: int, lr: float, precision_bits: int
) -> np.ndarray:
    """M_i = M_{i−1} − η_l · decode(A_0 + A_1) / Σ n_j, as float32."""
    if total_samples <= 0:
        raise ValueError("the agreed membership has no samples")
    weighted_sum = decode(reconstruct_encoded(share0, share1), precision_bits)
    return apply_update(previous, weighted_sum / float(total_samples), lr)


def apply_update(previous: np.ndarray, aggregate: np.ndarray, lr: float) -> np.ndarray:
    """M_i = M_{i−1} − η_l · G in float64, as float32 (both parties compute it identically)."""
    update = previous.astype(np.float64) - float(lr) * aggregate.astype(np.float64)
    return update.astype(np.float32)
