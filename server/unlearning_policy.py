"""Who chooses the parameters of an unlearning job, and within which bounds (`[unlearning]`).

* A client filing the unlearning of its own data (its client credential) gets the
  operator's parameters, `[unlearning] parameters`; a request naming any other parameters
  or strategy is refused (PERMISSION_DENIED): only the admin chooses parameters.
* The admin may override parameters, each within the operator's bounds
  `[unlearning.bounds]` (name = [low, high], inclusive). The bounds apply to the typed
  parameters after parsing (aliases such as `B` resolved); a non-finite or out-of-range
  value is refused with INVALID_ARGUMENT naming the parameter and its bounds.
* The operator's own parameters must lie within the bounds (checked at config load).

Without an `[unlearning.bounds]` table the defaults below hold: every numeric parameter of
a strategy that runs as a job is bounded to a range that keeps the unlearned model usable
and the job's duration bounded (an unlearning rate η_u above 1, a buffer of hundreds of
pairs or hundreds of recovery rounds are not in any tested setting). A numeric parameter
without a bound is refused (fail closed): a new parameter needs its default bound here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

#: request spellings of typed parameter names (as the strategies accept them)
ALIASES = {"B": "buffer_size", "T_delta": "switch_threshold", "eta": "eta_u"}

DEFAULT_BOUNDS: dict[str, tuple[float, float]] = {
    "sigma": (0.05, 1.0),
    "alpha": (0.01, 1.0),
    "beta": (0.01, 1.0),
    "buffer_size": (1, 16),
    "eta_u": (1e-6, 1.0),
    "switch_threshold": (1, 4096),
    "check_sample": (0, 100_000),
    "min_cohort": (2, 1000),
    "curvature_eps": (0.0, 1.0),
    "curvature_max": (1.0, 1e6),
    "hv_bound": (0.1, 1e3),
    "min_step": (0.0, 1e-3),
    "anchor_reach": (2.0, 10.0),
    "seed": (0, 2**31 - 1),
    "recovery_rounds": (0, 20),
    # FedRecover (unlearning.baselines.fedrecover): its exact-round schedule and τ's tolerance rate
    "warmup_rounds": (0, 10_000),
    "correction_interval": (0, 10_000),
    "final_tuning": (0, 10_000),
    "tolerance_rate": (1e-6, 1.0),
    # Crab (unlearning.baselines.crab): window rate α, round and client ratios λ, δ, sensitivity β
    "loss_reduction": (1e-3, 0.99),
    "round_ratio": (0.01, 1.0),
    "client_ratio": (0.01, 1.0),
    "sensitivity_ratio": (0.0, 100.0),
}


class PolicyError(ValueError):
    """A request (or the operator's configuration) outside the unlearning-parameter policy."""


@dataclass(frozen=True)
class UnlearningPolicy:
    """The operator's unlearning parameters and the bounds of admin overrides."""

    parameters: dict[str, Any] = field(default_factory=dict)  #: what a client's own request gets
    bounds: dict[str, tuple[float, float]] = field(default_factory=lambda: dict(DEFAULT_BOUNDS))

    def for_strategy(self, strategy: str) -> dict[str, Any]:
        """The operator's parameters that `strategy`'s parameter dataclass declares: all of them
        for Starfish (a client's own request runs it), the shared ones (e.g. `buffer_size`) for
        another strategy, none for an unknown one (the request is refused later)."""
        from unlearning import registry  # loads torch: only when a request arrives

        name = strategy or "starfish"
        if name not in registry.names():
            return {}
        declared = {f.name for f in fields(registry.strategy_class(name).params_type)}
        return {k: v for k, v in self.parameters.items() if ALIASES.get(k, k) in declared}

    def check(self, typed: Mapping[str, Any]) -> None:
        """Raise `PolicyError` if a bounded parameter of the parsed request is out of bounds."""
        for name, value in typed.items():
            if value is None or isinstance(value, (bool, str)):
                continue
            if name not in self.bounds:
                raise PolicyError(f"parameter {name} has no operator bound ([unlearning.bounds] {name})")
            low, high = self.bounds[name]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise PolicyError(f"parameter {name} must be a finite number in [{low:g}, {high:g}], got {value!r}")
            if not low <= value <= high:
                raise PolicyError(
                    f"parameter {name} = {value:g} is outside the operator's bounds [{low:g}, {high:g}] "
                    f"([unlearning.bounds] {name})"
                )


def _bound(name: str, value: object) -> tuple[float, float]:
    ok = isinstance(value, list) and len(value) == 2
    ok = ok and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value)
    if not ok or value[0] > value[1]:  # type: ignore[index]
        raise PolicyError(f"unlearning.bounds.{name} must be [low, high] with finite low ≤ high, got {value!r}")
    return float(value[0]), float(value[1])  # type: ignore[index]


def parse_policy(table: Mapping[str, Any]) -> UnlearningPolicy:
    """`[unlearning]` of the party TOML: `parameters` (a table) and `bounds` (name = [low, high])."""
    unknown = set(table) - {"parameters", "bounds"}
    if unknown:
        raise PolicyError(f"unknown key(s) {sorted(unknown)} in [unlearning]")
    parameters = table.get("parameters", {})
    bounds_t = table.get("bounds", {})
    if not isinstance(parameters, dict) or not isinstance(bounds_t, dict):
        raise PolicyError("[unlearning] parameters and bounds must be tables")
    bounds = dict(DEFAULT_BOUNDS)
    for name, value in bounds_t.items():
        canonical = ALIASES.get(name, name)
        if canonical not in DEFAULT_BOUNDS:
            raise PolicyError(f"unlearning.bounds.{name}: not a bounded parameter (known: {sorted(DEFAULT_BOUNDS)})")
        bounds[canonical] = _bound(name, value)
    policy = UnlearningPolicy(dict(parameters), bounds)
    canonical_params = {ALIASES.get(k, k): v for k, v in parameters.items()}
    try:
        policy.check(canonical_params)
    except PolicyError as exc:
        raise PolicyError(f"[unlearning] parameters: {exc}") from None
    return policy
