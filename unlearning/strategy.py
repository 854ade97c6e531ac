"""One interface for every unlearning strategy (Starfish and the baselines).

Modelled on Flower's `flwr/server/strategy`: one module per strategy, each a class
deriving `Strategy`; pure helper functions for the maths; explicit errors. What a caller
(the simulator, the job runtime) needs to know about a strategy is on the base class:

* `params_type` and `parse_params` — its typed parameters, parsed by one function
  (`unlearning.strategy_params.parse_params`) before any work;
* `requires_plaintext`, `needs_probe`, `resumable()` — what it needs to run (a plaintext
  history, a `ModelProbe`, checkpoints: resumable iff it names a `state_type`) and so
  whether it can run as a 2PC job;
* `run(ctx)` — parse, validate, then `unlearn(ctx, params)`, which each strategy writes;
* `state_type`, `restore_state` — a resumable strategy names its `ResumableState`, which
  `restore_state` rebuilds from the three parts a checkpoint stores (public JSON, public
  tensors, this party's secrets).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import torch

from mpc.backend import Backend, Secret
from unlearning.errors import UnlearningError
from unlearning.fedavg import AggregatePrivacy
from unlearning.history import GradientOracle, SharedHistory
from unlearning.probes import ModelProbe, require_probe
from unlearning.strategy_params import StrategyParams, parse_params

P = TypeVar("P", bound=StrategyParams)

__all__ = [
    "Progress",
    "check_resume",
    "run_request",
    "ResumableState",
    "Strategy",
    "UnlearnContext",
    "UnlearnResult",
    "UnlearningError",
]


@dataclass(frozen=True)
class Progress:
    """A progress event: which step, which unlearning round, how far."""

    step: str  #: "threshold", "round_selection", "warmup", "estimate", "threshold_check", "correction", ...
    unlearning_round: int  #: t (0 before the first round)
    total_rounds: int  #: T′
    detail: str = ""


class ResumableState(ABC):
    """A strategy's state after an unlearning round, in three parts a party stores without pickle."""

    @property
    @abstractmethod
    def round(self) -> int:
        """t, the unlearning rounds completed."""

    @abstractmethod
    def public_json(self) -> dict[str, Any]:
        """JSON-ready public facts (the same on both parties)."""

    @abstractmethod
    def public_tensors(self) -> dict[str, torch.Tensor]:
        """Public tensors by name (the same on both parties)."""

    @abstractmethod
    def secrets(self) -> dict[str, Secret]:
        """Secrets by name (each party stores its own share)."""

    @classmethod
    @abstractmethod
    def from_parts(
        cls, public: Mapping[str, Any], tensors: Mapping[str, torch.Tensor], secrets: Mapping[str, Secret]
    ) -> ResumableState:
        """Rebuild a state from the three parts; ValueError when a part is missing or malformed."""


@dataclass
class UnlearnContext:
    """Everything a strategy may use; `params` is the request's raw mapping, or the strategy's
    typed parameters when the caller parsed them already (the job service does, once)."""

    backend: Backend
    history: SharedHistory
    oracle: GradientOracle
    targets: tuple[str, ...]
    params: Mapping[str, Any] | StrategyParams = field(default_factory=dict)
    on_progress: Callable[[Progress], None] | None = None
    #: called after every completed unlearning round with the strategy's resumable state
    on_checkpoint: Callable[[ResumableState], None] | None = None
    #: state from a previous run's last checkpoint (resume), or None
    resume_from: ResumableState | None = None
    #: model outputs/loss on a probe set, for strategies that need them (Crab, FedADP)
    probe: ModelProbe | None = None
    #: optional differential privacy of every revealed aggregate (`privacy.distributed`)
    privacy: AggregatePrivacy | None = None

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


class Strategy(ABC, Generic[P]):
    """An unlearning method with parameters of type P (see the module docstring)."""

    name: str = "abstract"
    params_type: type[P]
    requires_plaintext: bool = False
    needs_probe: bool = False
    #: the state a resumable strategy checkpoints (`restore_state` rebuilds it); None: it does not resume
    state_type: type[ResumableState] | None = None

    @classmethod
    def resumable(cls) -> bool:
        """Whether it resumes from a checkpoint: it names the `state_type` it checkpoints."""
        return cls.state_type is not None

    @classmethod
    def parse_params(cls, raw: Mapping[str, Any]) -> P:
        """The request's parameters as `params_type` (raises `UnlearningError`)."""
        return parse_params(cls.params_type, raw, cls.name)

    @classmethod
    def runs_as_job(cls) -> bool:
        """Whether the 2PC job runtime can run it: secure-capable, no probe, resumable."""
        return cls.resumable() and not cls.requires_plaintext and not cls.needs_probe

    def run(self, ctx: UnlearnContext) -> UnlearnResult:
        """Unlearn `ctx.targets`: parse the parameters once (unless typed already), validate, then `unlearn`."""
        given = ctx.params
        params = given if isinstance(given, self.params_type) else self.parse_params(given)  # type: ignore[arg-type]
        self.validate(ctx, params)
        return self.unlearn(ctx, params)

    def validate(self, ctx: UnlearnContext, params: P) -> None:
        """Raise `UnlearningError` for targets, backend, probe or resume state this strategy cannot handle."""
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
        if self.needs_probe:
            require_probe(ctx.probe, self.name)
        if ctx.resume_from is not None and not self.resumable():
            raise UnlearningError(f"strategy {self.name!r} does not support resuming from a checkpoint")

    @abstractmethod
    def unlearn(self, ctx: UnlearnContext, params: P) -> UnlearnResult:
        """Unlearn `ctx.targets` with validated `params`; return the new model and a report."""

    @classmethod
    def restore_state(
        cls, public: Mapping[str, Any], tensors: Mapping[str, torch.Tensor], secrets: Mapping[str, Secret]
    ) -> ResumableState:
        """The `state_type` a checkpoint stored (`UnlearningError` when a part is missing or malformed,
        or when the strategy does not resume)."""
        if cls.state_type is None:
            raise UnlearningError(f"strategy {cls.name!r} does not support resuming from a checkpoint")
        try:
            return cls.state_type.from_parts(public, tensors, secrets)
        except ValueError as exc:
            raise UnlearningError(str(exc)) from None


def run_request(ctx: UnlearnContext, params: StrategyParams) -> dict[str, Any]:
    """What a run was asked (recorded in its log; a resume must ask the same)."""
    return {"targets": list(ctx.targets), "params": params.as_dict}


def check_resume(
    ctx: UnlearnContext,
    params: StrategyParams,
    state: object,
    state_type: type[ResumableState],
    last_round: Callable[[Any], int],
    method: str,
) -> None:
    """Refuse (`UnlearningError`) a checkpoint's state that is not a `state_type` (of `method`), was taken for
    other remaining clients, stands at a round outside 0..`last_round(state)`, holds a model of
    another size or was taken for another request (`run_request`)."""
    if not isinstance(state, state_type):
        raise UnlearningError(f"cannot resume {method} from a {type(state).__name__}")
    if tuple(ctx.remaining_clients()) != state.clients:
        raise UnlearningError("the checkpoint was taken for a different set of remaining clients")
    last = last_round(state)
    if not 0 <= state.round <= last:
        raise UnlearningError(f"checkpoint round {state.round} outside 0..{last}")
    if state.model.numel() != ctx.history.model(0).numel():
        raise UnlearningError("the checkpoint's model does not match the history's model size")
    if state.log.request != run_request(ctx, params):
        raise UnlearningError("the checkpoint was taken for other targets or parameters; resume with the same request")
