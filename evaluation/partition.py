"""Split a training set among FL clients, reproducibly from a seed.

* IID: a seeded permutation cut into N near-equal contiguous parts.
* Non-IID: the Dirichlet label-skew partition of Hsu et al. (2019): for every class c
  draw proportions p_c ~ Dir(β·1_N) and give client j the share p_{c,j} of class c's
  samples. Smaller β gives more skew. Draws are repeated (same generator) until every
  client holds at least `min_size` samples.

Every partition is a list of disjoint index arrays that together cover 0..n−1.
"""

from __future__ import annotations

import numpy as np

PARTITIONS = ("iid", "dirichlet")
#: Dirichlet draws attempted before giving up on the minimum client size
MAX_DIRICHLET_DRAWS = 1000


def iid_partition(n: int, num_clients: int, seed: int) -> list[np.ndarray]:
    """N near-equal random parts of range(n) (sizes differ by at most one)."""
    _check(n, num_clients, 1)
    perm = np.random.default_rng(seed).permutation(n)
    return [np.sort(part) for part in np.array_split(perm, num_clients)]


def dirichlet_partition(
    labels: np.ndarray, num_clients: int, beta: float, seed: int, min_size: int = 1
) -> list[np.ndarray]:
    """Label-skewed parts: class c is split by proportions drawn from Dir(β)."""
    labels = np.asarray(labels)
    _check(len(labels), num_clients, min_size)
    if beta <= 0:
        raise ValueError(f"Dirichlet concentration β must be positive; got {beta}")
    rng = np.random.default_rng(seed)
    classes = np.unique(labels)
    for _ in range(MAX_DIRICHLET_DRAWS):
        parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
        for c in classes:
            idx = rng.permutation(np.flatnonzero(labels == c))
            props = rng.dirichlet(np.full(num_clients, beta))
            cuts = (np.cumsum(props)[:-1] * len(idx)).astype(int)
            for j, chunk in enumerate(np.split(idx, cuts)):
                parts[j].append(chunk)
        out = [np.sort(np.concatenate(p)) for p in parts]
        if min(len(p) for p in out) >= min_size:
            return out
    raise ValueError(f"no Dirichlet(β={beta}) draw gave every one of {num_clients} clients ≥ {min_size} samples")


def partition(
    labels: np.ndarray, num_clients: int, kind: str, seed: int, beta: float = 0.5, min_size: int = 1
) -> list[np.ndarray]:
    """Dispatch on `kind` ∈ `PARTITIONS`."""
    if kind == "iid":
        return iid_partition(len(labels), num_clients, seed)
    if kind == "dirichlet":
        return dirichlet_partition(labels, num_clients, beta, seed, min_size)
    raise ValueError(f"unknown partition {kind!r}; choose one of {', '.join(PARTITIONS)}")


def _check(n: int, num_clients: int, min_size: int) -> None:
    if num_clients < 1:
        raise ValueError(f"need at least one client; got {num_clients}")
    if n < num_clients * max(min_size, 1):
        raise ValueError(f"{n} samples cannot give {num_clients} clients {max(min_size, 1)} sample(s) each")
