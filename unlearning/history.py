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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch

from mpc.backend import Backend, Secret


@dataclass(frozen=True)
class RoundInfo:
    """Public facts about stored round i."""

    index: int  #: i, 1-based
    clients: tuple[str, ...]  #: clients whose gradients were aggregated in round i
    n_samples: Mapping[str, int]  #: FedAvg weights n_j Stage I aggregated with (the capped w_j; public)
    lr: float  #: η_l used to form M_i = M_{i−1} − η_l · G_i
    #: client → enrolled principal (organisation); a client not listed is its own (unlearning.weight_cap)
    principals: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class UploadPrivacy:
    """How the clients privatized their uploads while the history was recorded (public).

    FedADP's Algorithm 1 (lines 10–12, eq. (5)–(6)): each upload of round i was clipped to
    norm S and noised with N(0, σ_i²·I), σ_i = S·√(2 ln(1.25/δ))/ε_i, the budget ε_i given by
    eq. (4) along the training. A history that declares this holds only privatized uploads,
    and its global models are aggregates of them.
    """

    mechanism: str  #: "gaussian"
    clip_norm: float  #: S
    delta: float  #: δ
    budgets: tuple[float, ...]  #: ε_1..ε_T
    noise_std: tuple[float, ...]  #: σ_1..σ_T


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

    def upload_privacy(self) -> UploadPrivacy | None:
        """The privacy mechanism the clients applied to their uploads, or None (clean uploads)."""
        return None

    def all_clients(self) -> list[str]:
        """Every client that appears in some stored round, sorted."""
        seen: set[str] = set()
        for i in range(1, self.num_rounds + 1):
            seen.update(self.round_info(i).clients)
        return sorted(seen)


@dataclass(frozen=True)
class GradientRequest:
    """ "Compute your exact gradient at model M̂ (hash) for unlearning round t,
    using the data order of original round i where possible".

    Two optional fields change the local training a client runs:

    * `local_epochs`: run this many local epochs instead of the client's regular number
      (PUF's unlearning epochs E_u, FedEraser's calibration epochs); None: regular;
    * `fresh_order`: visit the data in an order never used before, as a new FL round
      would (PUF's unlearning and recovery rounds continue training after round T), instead
      of the order of original round i.

    The service's client task protocol carries neither field; its jobs run strategies that
    leave both at their defaults, and its oracle refuses a request that sets them.
    """

    model: torch.Tensor  #: M̂_t (public, flat float32)
    unlearning_round: int  #: t
    original_round: int  #: i, the stored round being replaced
    clients: tuple[str, ...]
    reason: str  #: why: "warmup", "correction", "retrain", "calibration", "negation", "recovery", ...
    local_epochs: int | None = None  #: None: the client's regular local epochs
    fresh_order: bool = False  #: True: a new data order instead of original round i's

    def __post_init__(self) -> None:
        if self.local_epochs is not None and (isinstance(self.local_epochs, bool) or self.local_epochs < 1):
            raise ValueError(f"local_epochs must be a positive integer or None; got {self.local_epochs!r}")


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
    privacy: UploadPrivacy | None = None  #: declared upload privatization (None: clean uploads)

    def upload_privacy(self) -> UploadPrivacy | None:
        return self.privacy

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
