"""What an unlearning algorithm reads (the stored FL history) and whom it asks
for fresh gradients (the remaining clients).

Both are interfaces so that the same algorithm runs in three places:

* the plaintext simulator (`evaluation/`): history in memory, oracle trains locally;
* the 2PC simulator/tests: the same, with values shared via `Backend.share`;
* the service job runner (`server/`): history loaded lazily from each party's
  durable share store, oracle implemented by posting tasks to the client SDK.

Round numbering follows the paper: global models M_0 … M_T, round i (1 ≤ i ≤ T)
starts from M_{i−1}, collects gradients g_i^j and produces M_i.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import torch

from mpc.backend import Backend, Secret


@dataclass(frozen=True)
class RoundInfo:
    """Public facts about stored round i."""

    index: int  #: i, 1-based
    clients: tuple[str, ...]  #: clients whose gradients were aggregated in round i
    n_samples: Mapping[str, int]  #: FedAvg weights n_j (public)
    lr: float  #: η_l used to form M_i = M_{i−1} − η_l · G_i


class SharedHistory(ABC):
    """The stored history of Stage I: public models and secret per-client uploads."""

    @property
    @abstractmethod
    def num_rounds(self) -> int:
        """T, the number of stored rounds."""

    @abstractmethod
    def model(self, i: int) -> torch.Tensor:
        """Public global model M_i (flat float32), 0 ≤ i ≤ T."""

    @abstractmethod
    def round_info(self, i: int) -> RoundInfo:
        """Public membership and weights of round i."""

    @abstractmethod
    def gradients(self, backend: Backend, i: int, clients: Sequence[str]) -> Secret:
        """[g_i^j] for the given clients of round i, stacked as (len(clients), m)."""

    @abstractmethod
    def norms(self, backend: Backend, i: int, clients: Sequence[str]) -> Secret:
        """[‖g_i^j‖] as reported by the clients, shape (len(clients),)."""

    @abstractmethod
    def thresholds(self, backend: Backend, i: int, clients: Sequence[str]) -> Secret:
        """[δ_i^j] (tolerance-rate thresholds) as reported, shape (len(clients),)."""

    def all_clients(self) -> list[str]:
        """Every client that appears in some stored round, sorted."""
        seen: set[str] = set()
        for i in range(1, self.num_rounds + 1):
            seen.update(self.round_info(i).clients)
        return sorted(seen)


@dataclass(frozen=True)
class GradientRequest:
    """ "Compute your exact gradient at model M̂ (hash) for unlearning round t,
    using the data order of original round i where possible"."""

    model: torch.Tensor  #: M̂_t (public, flat float32)
    unlearning_round: int  #: t
    original_round: int  #: i, the stored round being replaced
    clients: tuple[str, ...]
    reason: str  #: "warmup" or "correction"


class GradientOracle(ABC):
    """Asks remaining clients for fresh gradients (warm-up and correction)."""

    @abstractmethod
    def exact_gradients(self, backend: Backend, request: GradientRequest) -> Mapping[str, Secret | None]:
        """Secret [ĝ^j] (shape (m,)) per requested client; None for a client that did
        not answer before its deadline (the algorithm then keeps its estimate)."""


@dataclass
class InMemoryHistory(SharedHistory):
    """History held in memory as backend secrets (simulator and tests)."""

    models: list[torch.Tensor]
    infos: list[RoundInfo]
    grads: dict[tuple[int, str], Secret] = field(default_factory=dict)
    grad_norms: dict[tuple[int, str], Secret] = field(default_factory=dict)
    deltas: dict[tuple[int, str], Secret] = field(default_factory=dict)

    @property
    def num_rounds(self) -> int:
        return len(self.infos)

    def model(self, i: int) -> torch.Tensor:
        if not 0 <= i <= self.num_rounds:
            raise IndexError(f"model index {i} outside 0..{self.num_rounds}")
        return self.models[i]

    def round_info(self, i: int) -> RoundInfo:
        if not 1 <= i <= self.num_rounds:
            raise IndexError(f"round {i} outside 1..{self.num_rounds}")
        return self.infos[i - 1]

    def _stack(self, backend: Backend, table: dict[tuple[int, str], Secret], i: int, clients: Sequence[str]) -> Secret:
        missing = [c for c in clients if (i, c) not in table]
        if missing:
            raise KeyError(f"round {i} has no stored upload for clients {missing}")
        return backend.stack([table[(i, c)] for c in clients])

    def gradients(self, backend: Backend, i: int, clients: Sequence[str]) -> Secret:
        return self._stack(backend, self.grads, i, clients)

    def norms(self, backend: Backend, i: int, clients: Sequence[str]) -> Secret:
        return self._stack(backend, self.grad_norms, i, clients)

    def thresholds(self, backend: Backend, i: int, clients: Sequence[str]) -> Secret:
        return self._stack(backend, self.deltas, i, clients)
