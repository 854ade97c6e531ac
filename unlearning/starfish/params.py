"""Starfish parameters (Algorithm 4 inputs) and their validation.

T′ = ⌈σT⌉ unlearning rounds (Algorithm 4 input) and the correction interval T_c = ⌈βT⌉
(Algorithm 4 input; T is the number of stored rounds).

Defaults: σ = 1, α = 0.4, β = 0.3, B = 2, one recovery round and an L-BFGS correction
dropped when it exceeds twice its client's gradient (hv_bound 2). The paper's (§VI-A) are
σ = 0.6 and β = 0.1 with no recovery round; on histories of tens of rounds ⌈0.6T⌉ replayed
steps leave the unlearned model under-trained (4.9–6.1 points of test error above
retraining on 5k MNIST, docs/QUALITY.md). Replaying every stored round and spending the
clients' exact rounds as B warm-up rounds, a check every ⌈0.3T⌉ rounds and one recovery
round keeps TER and BA-ASR within 1 point of retraining in every case of the quality
matrix, at ARP = 1 − (B + ⌊T/T_c⌋ + 1)/T (70 % at T = 20; docs/QUALITY.md "Defaults").
Round selection then keeps every round: σ < 1 is a cost lever (fewer replayed rounds), not
a quality one (docs/QUALITY.md "SecRS against random round selection").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from unlearning.errors import UnlearningError
from unlearning.starfish.anchor_noise import ANCHOR_REACH
from unlearning.strategy_params import ALIAS, StrategyParams

#: round-selection comparison methods (Algorithm 1 and Appendix C, Algorithm 6)
METHODS = ("auto", "method1", "method2", "alt")
#: ways to invert the 2B×2B L-BFGS middle matrix (Appendix E, Algorithm 7, or Newton–Schulz)
INVERSES = ("secmi", "newton")

#: Default switching threshold T_δ: Method 1 (SecGE2, no division) is used when T ≤ T_δ.
#: Calibrated from measured CrypTen costs (bench/results/switching_quick.json: a full SecRS
#: with Method 2 first becomes faster at T = 65 and smaller in bytes at T = 64); the paper's
#: rule (§V-A) assumes ABY's costs. Pass `switch_threshold` to use another calibration.
DEFAULT_SWITCH_THRESHOLD = 64

#: the smallest accepted minimum cohort: k = 1 would let one client's update be published alone
MIN_COHORT_FLOOR = 2


@dataclass(frozen=True)
class StarfishParams(StrategyParams):
    """Parameters of one Starfish run (`unlearning.strategy_params.parse_params` builds and checks them)."""

    sigma: float = 1.0  #: selection rate σ ∈ (0, 1]: T′ = ⌈σT⌉ (the paper's: 0.6)
    alpha: float = 0.4  #: tolerance rate α ∈ (0, 1] (used by clients for δ_i^j; recorded)
    beta: float = 0.3  #: interval rate β ∈ (0, 1]: T_c = ⌈βT⌉ (the paper's: 0.1)
    buffer_size: int = field(default=2, metadata={ALIAS: "B"})  #: B ≥ 1, L-BFGS pairs kept per client
    #: unlearning rate η_u > 0; None = η_l of each replayed round
    eta_u: float | None = field(default=None, metadata={ALIAS: "eta"})
    switch_threshold: int = field(default=DEFAULT_SWITCH_THRESHOLD, metadata={ALIAS: "T_delta"})  #: T_δ ≥ 1
    method: str = "auto"  #: one of METHODS
    inverse: str = "secmi"  #: one of INVERSES
    #: curvature safeguard: a pair is kept iff yᵀs ≥ max(curvature_eps, 2^-12)·sᵀs and
    #: ‖y‖² ≤ curvature_max·yᵀs (one revealed bit per client and pair; the floor is
    #: `unlearning.lbfgs.CURVATURE_FLOOR`)
    curvature_eps: float = 1e-6
    curvature_max: float = 1e3
    #: ‖Hv‖ bound: the L-BFGS correction is dropped (obliviously) if ‖Hv‖ > hv_bound·‖g‖. At 10 an
    #: estimate could be ten times its client's gradient: on the CNN a replay pushed off Stage I's
    #: path by the anchored noise then diverged (TER +17 to +27 points); 2 keeps the matrix's figures
    #: and removes the divergence (docs/QUALITY.md "Defaults")
    hv_bound: float = 2.0
    #: model differences with ‖s‖ ≤ min_step are degenerate (public test): no pair, warm-up goes on
    min_step: float = 1e-9
    #: SecTC sample-first pass (docs/ALGORITHM.md §4): check this many public pseudo-random coordinates
    #: first (0 = off). Same flags; reveals one extra bit per client and check round.
    check_sample: int = 0
    #: minimum cohort k ≥ 2: a Stage II update is revealed only when every combination of it with the
    #: public Stage I aggregates involves at least k clients (release.py, docs/PRIVACY.md)
    min_cohort: int = 3
    #: the clients' exact gradient at a model point does not depend on the replayed round's data
    #: order (full-batch training): the release rule then treats an answer at M_{i−1} as the very
    #: vector Stage I aggregated in round i, whichever round is replayed (release.py)
    full_batch_gradients: bool = False
    #: a reveal that holds steps taken at a Stage I model carries the anchored noise
    #: (anchor_noise.py, docs/PRIVACY.md "Anchored reveals"); off, such a reveal is differenceable
    #: against the Stage I aggregate (tests that compare a job with a plaintext run turn it off)
    anchor_noise: bool = True
    #: a step counts as taken at a Stage I model point M_{i−1} for the anchored noise while the
    #: public model is within anchor_reach Stage I steps of it: ‖M̂_t − M_{i−1}‖ ≤ anchor_reach·‖M_i − M_{i−1}‖
    #: (release.near_anchor; docs/PRIVACY.md "Anchored reveals")
    anchor_reach: float = ANCHOR_REACH
    #: R ≥ 0 FedAvg rounds with the remaining clients after the replay (recovery.py; each counts in ARP;
    #: not in the paper)
    recovery_rounds: int = 1

    def unlearning_rate(self, stored_lr: float) -> float:
        """η_u, or by default the stored round's η_l (as FedRecover; see docs/ALGORITHM.md)."""
        return float(self.eta_u) if self.eta_u is not None else stored_lr

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

    def check(self) -> None:
        """Raise `UnlearningError` with a clear message for any value out of its range."""
        for name, value in (("sigma", self.sigma), ("alpha", self.alpha), ("beta", self.beta)):
            if not 0 < value <= 1:
                raise UnlearningError(f"{name} must be in (0, 1], got {value!r}")
        for name, count, low in (
            ("buffer_size", self.buffer_size, 1),
            ("switch_threshold", self.switch_threshold, 1),
            ("check_sample", self.check_sample, 0),
            ("min_cohort", self.min_cohort, MIN_COHORT_FLOOR),
            ("recovery_rounds", self.recovery_rounds, 0),
        ):
            if count < low:
                raise UnlearningError(f"{name} must be ≥ {low}, got {count}")
        positive = (("eta_u", self.eta_u), ("hv_bound", self.hv_bound), ("curvature_max", self.curvature_max))
        for name, bound in positive:
            if bound is not None and not bound > 0:
                raise UnlearningError(f"{name} must be positive, got {bound!r}")
        for name, bound in (
            ("curvature_eps", self.curvature_eps),
            ("min_step", self.min_step),
            ("anchor_reach", self.anchor_reach),
        ):
            if bound < 0:
                raise UnlearningError(f"{name} must be non-negative, got {bound!r}")
        if self.method not in METHODS:
            raise UnlearningError(f"method must be one of {METHODS}, got {self.method!r}")
        if self.inverse not in INVERSES:
            raise UnlearningError(f"inverse must be one of {INVERSES}, got {self.inverse!r}")
