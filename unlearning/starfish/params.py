"""Starfish parameters (Algorithm 4 inputs) and their validation.

Paper defaults (§VI-A): selection rate σ = 0.6, tolerance rate α = 0.4, interval rate
β = 0.1, buffer size B = 2. T′ = ⌈σT⌉ unlearning rounds (Algorithm 4 input) and the
correction interval T_c = ⌈βT⌉ (Algorithm 4 input; T is the number of stored rounds).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any, Mapping

from unlearning.strategy import UnlearningError

#: round-selection comparison methods (Algorithm 1 and Appendix C, Algorithm 6)
METHODS = ("auto", "method1", "method2", "alt")
#: ways to invert the 2B×2B L-BFGS middle matrix (Appendix E, Algorithm 7, or Newton–Schulz)
INVERSES = ("secmi", "newton")

#: Default switching threshold T_δ: Method 1 (SecGE2, no division) is used when T ≤ T_δ.
#: Calibrated from measured CrypTen costs (bench/results/switching_quick.json: a full SecRS
#: with Method 2 first becomes faster at T = 65 and smaller in bytes at T = 64); the paper's
#: rule (§V-A) assumes ABY's costs. Pass `switch_threshold` to use another calibration.
DEFAULT_SWITCH_THRESHOLD = 64


@dataclass(frozen=True)
class StarfishParams:
    """Validated parameters of one Starfish run."""

    sigma: float = 0.6  #: selection rate σ ∈ (0, 1]: T′ = ⌈σT⌉
    alpha: float = 0.4  #: tolerance rate α ∈ (0, 1] (used by clients for δ_i^j; recorded)
    beta: float = 0.1  #: interval rate β ∈ (0, 1]: T_c = ⌈βT⌉
    buffer_size: int = 2  #: B ≥ 1, L-BFGS pairs kept per client
    eta_u: float | None = None  #: unlearning rate η_u > 0; None = η_l of each replayed round
    switch_threshold: int = DEFAULT_SWITCH_THRESHOLD  #: T_δ ≥ 1
    method: str = "auto"  #: one of METHODS
    inverse: str = "secmi"  #: one of INVERSES
    #: curvature safeguard: a pair is kept iff yᵀs ≥ curvature_eps·sᵀs and
    #: ‖y‖² ≤ curvature_max·yᵀs (one revealed bit per client and pair)
    curvature_eps: float = 1e-6
    curvature_max: float = 1e3
    #: ‖Hv‖ bound: the L-BFGS correction is dropped (obliviously) if ‖Hv‖ > hv_bound·‖g‖
    hv_bound: float = 10.0
    #: model differences with ‖s‖ ≤ min_step are degenerate (public test): no pair, warm-up goes on
    min_step: float = 1e-9
    #: SecTC sample-first pass (DESIGN §6.4): check this many public pseudo-random coordinates
    #: first (0 = off). Same flags; reveals one extra bit per client and check round.
    check_sample: int = 0

    def unlearning_rate(self, stored_lr: float) -> float:
        """η_u, or by default the stored round's η_l (as FedRecover; see docs/ALGORITHM.md)."""
        return float(self.eta_u) if self.eta_u is not None else stored_lr

    @property
    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def selected_count(self, total_rounds: int) -> int:
        """T′ = ⌈σT⌉ (Algorithm 4 input)."""
        return min(total_rounds, max(1, math.ceil(self.sigma * total_rounds - 1e-12)))

    def check_interval(self, total_rounds: int) -> int:
        """T_c = ⌈βT⌉ (Algorithm 4 input: the paper sets T_c from T, not T′)."""
        return max(1, math.ceil(self.beta * total_rounds - 1e-12))

    def comparison(self, total_rounds: int) -> str:
        """The SecRS comparison: "method1" (SecGE2) or "method2" (SecDiv + SecGE).

        "auto" and "alt" follow Algorithm 1 line 4: Method 1 iff T ≤ T_δ.
        """
        if self.method in ("method1", "method2"):
            return self.method
        return "method1" if total_rounds <= self.switch_threshold else "method2"

    @classmethod
    def from_mapping(cls, params: Mapping[str, Any]) -> "StarfishParams":
        """Build from a request's parameter mapping; unknown keys and bad values raise."""
        known = {f.name for f in fields(cls)}
        aliases = {"B": "buffer_size", "T_delta": "switch_threshold", "eta": "eta_u"}
        values: dict[str, Any] = {}
        for key, value in params.items():
            name = aliases.get(key, key)
            if name not in known:
                raise UnlearningError(f"unknown Starfish parameter {key!r} (known: {sorted(known)})")
            values[name] = value
        out = cls(**values)
        out.validate()
        return out

    def validate(self) -> None:
        """Raise `UnlearningError` with a clear message for any invalid value."""
        for name in ("sigma", "alpha", "beta"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise UnlearningError(f"{name} must be a number in (0, 1], got {value!r}")
            if not 0 < value <= 1:
                raise UnlearningError(f"{name} must be in (0, 1], got {value!r}")
        for name, low in (("buffer_size", 1), ("switch_threshold", 1), ("check_sample", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise UnlearningError(f"{name} must be an integer, got {value!r}")
            if value < low:
                raise UnlearningError(f"{name} must be ≥ {low}, got {value}")
        for name in ("eta_u", "curvature_eps", "curvature_max", "hv_bound", "min_step"):
            value = getattr(self, name)
            if value is None and name == "eta_u":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise UnlearningError(f"{name} must be a finite number, got {value!r}")
            if value < 0 or (value == 0 and name in ("eta_u", "hv_bound", "curvature_max")):
                raise UnlearningError(f"{name} must be positive, got {value!r}")
        if self.method not in METHODS:
            raise UnlearningError(f"method must be one of {METHODS}, got {self.method!r}")
        if self.inverse not in INVERSES:
            raise UnlearningError(f"inverse must be one of {INVERSES}, got {self.inverse!r}")
