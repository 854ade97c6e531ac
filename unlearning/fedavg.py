"""FedAvg over secret gradients: the one place an unlearning strategy reveals an aggregate.

With public weights w_j (FedAvg's n_j / Σ_k n_k, or signed ones such as PUF's), the
aggregate G = Σ_j w_j·[g_j] is a local product of the public weight row with the stacked
secrets, and only G (m values) is revealed (Starfish Algorithm 2 lines 13–14; the
baselines' aggregation steps). On the plaintext backend the same code returns the sum.
Starfish forms the weighted sum in shares first (`weighted_sum`) and reveals it, or a sum of
several held ones, when its release rule allows (`unlearning.starfish.release`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from mpc.backend import Backend, Secret
from unlearning.history import RoundInfo
from unlearning.strategy import UnlearningError


def fedavg_weights(info: RoundInfo, clients: Sequence[str]) -> dict[str, float]:
    """FedAvg weights n_j / Σ_{k∈clients} n_k over `clients` of round `info`."""
    total = sum(info.n_samples[c] for c in clients)
    if total <= 0:
        raise UnlearningError(f"round {info.index}: clients {list(clients)} hold no samples")
    return {c: info.n_samples[c] / total for c in clients}


def weighted_sum(backend: Backend, gradients: Secret, weights: Sequence[float]) -> Secret:
    """[Σ_j w_j·g_j] for stacked gradients (n, m) and n public weights (local), shape (m,)."""
    if len(weights) != gradients.shape[0]:
        raise ValueError(f"{len(weights)} weights for {gradients.shape[0]} gradients")
    w = torch.tensor([float(x) for x in weights], dtype=torch.float64)
    return backend.matmul(w, gradients)


def reveal_update(backend: Backend, update: Secret) -> torch.Tensor:
    """Reveal one secret aggregate (a weighted sum, or a sum of them); (m,) float64."""
    return backend.reveal(update).to(torch.float64)


def reveal_aggregate(backend: Backend, gradients: Secret, weights: Sequence[float]) -> torch.Tensor:
    """Reveal only G = Σ_j w_j·[g_j] for stacked gradients (n, m) and n public weights; (m,) float64."""
    return reveal_update(backend, weighted_sum(backend, gradients, weights))


def reveal_client_aggregate(
    backend: Backend, gradients: Mapping[str, Secret], weights: Mapping[str, float]
) -> torch.Tensor:
    """`reveal_aggregate` over per-client secrets (m,) with per-client weights."""
    clients = list(gradients)
    return reveal_aggregate(backend, backend.stack([gradients[c] for c in clients]), [weights[c] for c in clients])
