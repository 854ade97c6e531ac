"""One interface for every unlearning strategy (Starfish and the baselines).

Modelled on Flower's `flwr/server/strategy`: one module per strategy, each a class
with a `run(context) -> UnlearnResult`; pure helper functions for the maths; explicit
errors. Strategies that need plaintext values (FedEraser, Crab, ...) declare
`requires_plaintext = True` and refuse a secure backend.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

import torch

from mpc.backend import Backend
from unlearning.history import GradientOracle, SharedHistory

if TYPE_CHECKING:  # pragma: no cover - import for type checkers only
    from unlearning.probes import ModelProbe


class UnlearningError(ValueError):
    """An unlearning request that cannot be carried out (bad targets or parameters)."""


@dataclass(frozen=True)
class Progress:
    """A progress event: which step, which unlearning round, how far."""

    step: str  #: "threshold", "round_selection", "warmup", "estimate", "threshold_check", "correction", ...
    unlearning_round: int  #: t (0 before the first round)
    total_rounds: int  #: T′
    detail: str = ""


@dataclass
class UnlearnContext:
    """Everything a strategy may use."""

    backend: Backend
    history: SharedHistory
    oracle: GradientOracle
    targets: tuple[str, ...]
    params: Mapping[str, Any] = field(default_factory=dict)
    on_progress: Callable[[Progress], None] | None = None
    #: called after every completed unlearning round with the strategy's resumable state
    on_checkpoint: Callable[[Any], None] | None = None
    #: state from a previous run's last checkpoint (resume), or None
    resume_from: Any = None
    #: model outputs/loss on a probe set, for strategies that need them (Crab, FedADP)
    probe: "ModelProbe | None" = None

    def progress(self, step: str, t: int, total: int, detail: str = "") -> None:
        if self.on_progress is not None:
            self.on_progress(Progress(step, t, total, detail))

    def remaining_clients(self) -> list[str]:
        """Clients of the history that are not targets (sorted)."""
        targets = set(self.targets)
        return [c for c in self.history.all_clients() if c not in targets]


@dataclass
class UnlearnResult:
    """The unlearned model and a JSON-ready report."""

    model: torch.Tensor  #: M̂ (flat float32, public)
    report: dict[str, Any]


class Strategy(ABC):
    """An unlearning method."""

    name: str = "abstract"
    requires_plaintext: bool = False

    def validate(self, ctx: UnlearnContext) -> None:
        """Raise `UnlearningError` for targets or parameters this strategy cannot handle."""
        if self.requires_plaintext and ctx.backend.is_secure:
            raise UnlearningError(f"strategy {self.name!r} needs the plaintext history and cannot run under 2PC")
        known = set(ctx.history.all_clients())
        if not ctx.targets:
            raise UnlearningError("no target client given")
        unknown = sorted(set(ctx.targets) - known)
        if unknown:
            raise UnlearningError(f"unknown target client(s): {unknown}")
        if not ctx.remaining_clients():
            raise UnlearningError("every client is a target: nothing would remain to learn from")

    @abstractmethod
    def run(self, ctx: UnlearnContext) -> UnlearnResult:
        """Unlearn `ctx.targets` and return the new model and a report."""
