"""FedAvg over secret gradients: the one place an unlearning strategy reveals an aggregate.

With public weights w_j (FedAvg's n_j / Σ_k n_k, or signed ones such as PUF's), the
aggregate G = Σ_j w_j·[g_j] is a local product of the public weight row with the stacked
secrets, and only G (m values) is revealed (Starfish Algorithm 2 lines 13–14; the
baselines' aggregation steps). On the plaintext backend the same code returns the sum.
Starfish forms the weighted sum in shares first (`weighted_sum`) and reveals it, or a sum of
several held ones, when its release rule allows (`unlearning.starfish.release`).

With a `privacy` aggregator (`privacy.distributed.PrivateAggregator`, optional
differential privacy) the gradients are clipped inside 2PC and G is opened with
distributed Gaussian noise instead; the aggregator logs the release for the accountant.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import torch

from mpc.backend import Backend, Secret
from unlearning.errors import UnlearningError
from unlearning.history import RoundInfo
from unlearning.weight_cap import capped_weights, fractions


class AggregatePrivacy(Protocol):
    """What `reveal_aggregate` needs of an optional DP mechanism (`privacy.distributed`)."""

    def reveal(
        self, backend: Backend, gradients: Secret, weights: Sequence[float], members: Sequence[str], label: str
    ) -> torch.Tensor: ...

    def clipped_sum(self, backend: Backend, gradients: Secret, weights: Sequence[float]) -> tuple[Secret, float]: ...

    def reveal_sum(
        self, backend: Backend, total: Secret, sensitivity: float, members: Sequence[str], label: str
    ) -> torch.Tensor: ...


def fedavg_weights(info: RoundInfo, clients: Sequence[str]) -> dict[str, float]:
    """FedAvg weights n_j / Σ_{k∈clients} n_k over `clients` of round `info`."""
    total = sum(info.n_samples[c] for c in clients)
    if total <= 0:
        raise UnlearningError(f"round {info.index}: clients {list(clients)} hold no samples")
    return {c: info.n_samples[c] / total for c in clients}


def capped_fedavg_weights(info: RoundInfo, clients: Sequence[str], min_cohort: int) -> dict[str, float] | None:
    """FedAvg weights over `clients` capped so that no principal holds more than 1/k of them
    (k = `min_cohort`; unlearning.weight_cap over round `info`'s weights and principals), or None
    when fewer than k principals remain (such an aggregate is never revealed)."""
    capped = capped_weights({c: int(info.n_samples[c]) for c in clients}, info.principals, min_cohort)
    return None if capped is None else fractions(capped)


def weighted_sum(backend: Backend, gradients: Secret, weights: Sequence[float]) -> Secret:
    """[Σ_j w_j·g_j] for stacked gradients (n, m) and n public weights (local), shape (m,)."""
    if len(weights) != gradients.shape[0]:
        raise ValueError(f"{len(weights)} weights for {gradients.shape[0]} gradients")
    w = torch.tensor([float(x) for x in weights], dtype=torch.float64)
    return backend.matmul(w, gradients)


def reveal_update(backend: Backend, update: Secret) -> torch.Tensor:
    """Reveal one secret aggregate (a weighted sum, or a sum of them); (m,) float64."""
    return backend.reveal(update).to(torch.float64)


def reveal_aggregate(
    backend: Backend,
    gradients: Secret,
    weights: Sequence[float],
    privacy: AggregatePrivacy | None = None,
    members: Sequence[str] = (),
    label: str = "",
) -> torch.Tensor:
    """Reveal only G = Σ_j w_j·[g_j] for stacked gradients (n, m) and n public weights; (m,) float64.

    With `privacy`, the clipped and noised G of the DP mechanism; `members` (the clients of
    the rows) and `label` name the release in its log."""
    if len(weights) != gradients.shape[0]:
        raise ValueError(f"{len(weights)} weights for {gradients.shape[0]} gradients")
    if privacy is not None:
        if len(members) != len(weights):
            raise ValueError(f"{len(members)} members for {len(weights)} weights")
        return privacy.reveal(backend, gradients, weights, members, label)
    return reveal_update(backend, weighted_sum(backend, gradients, weights))


def reveal_client_aggregate(
    backend: Backend,
    gradients: Mapping[str, Secret],
    weights: Mapping[str, float],
    privacy: AggregatePrivacy | None = None,
    label: str = "",
) -> torch.Tensor:
    """`reveal_aggregate` over per-client secrets (m,) with per-client weights."""
    clients = list(gradients)
    stacked = backend.stack([gradients[c] for c in clients])
    return reveal_aggregate(backend, stacked, [weights[c] for c in clients], privacy, clients, label)
