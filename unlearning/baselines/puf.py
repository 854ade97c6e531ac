"""PUF: federated unlearning via negated pseudo-gradients (PUF paper, Algorithm 1).

What the paper does. A client's FedAvg update is a pseudo-gradient, Δ_t^k = w^k − w_t
(eq. (2)). To forget the target clients S_t^−, PUF lets them train one last time from
the current global model w_t and applies their aggregate update with its sign flipped
and scaled by the unlearning rate η_u (Algorithm 1, lines 13–18):

* PUF-Special (eq. (9)): a dedicated round with the targets only,
  w_ū = w_t − η_u·Δ_t^−,  Δ_t^− = (1/n) Σ_{j∈S_t^−} |D_j| Δ_t^j,  n = Σ_{j∈S_t^−} |D_j|;
* PUF-Regular (eq. (4)–(8)): a regular round in which remaining clients S_t^+ also train,
  w_ū = w_t + η_r·Δ_t^+ − η_u·Δ_t^−, with n summing over S_t^+ ∪ S_t^−.

Regular FedAvg training then resumes from w_ū with the remaining clients ("recovery").
Paper defaults (η_s = 1): η_u = 2 for PUF-Special, η_u = 20 and η_r = 1 for PUF-Regular.

What we implement. w_t = M_T, the last stored model. Clients upload pseudo-gradients
g = (w_t − w^k)/η_l (DESIGN §4), so Δ^k = −η_l·g^k with η_l the learning rate of round T;
the targets' and the remaining clients' g are fresh answers of the GradientOracle at
M_T. The signed weighted sum is aggregated under the backend and only the aggregate
(which is the public model change) is revealed, so PUF runs on the secure backend too.
Then `recovery_rounds` FedAvg rounds over the remaining members of round T follow
(learning rate and weights of round T; data order of round T).

Deviations (docs/BASELINES.md): the paper recovers "until the retrained model's
accuracy is matched"; we run a fixed number of recovery rounds (default ⌈T/10⌉).
In PUF-Regular every remaining client of round T joins S_t^+ unless
`regular_fraction` < 1, in which case a seeded random subset is drawn.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from unlearning.baselines.common import (
    BaselineStrategy,
    RunLog,
    aggregate,
    check_choice,
    check_range,
    descend,
    fedavg_weights,
    parse_params,
)
from unlearning.history import SharedHistory
from unlearning.strategy import UnlearnContext, UnlearningError, UnlearnResult

NAME = "puf"
#: paper defaults for η_u per operating mode (PUF §V-A)
DEFAULT_ETA_U = {"special": 2.0, "regular": 20.0}


@dataclass(frozen=True)
class PUFParams:
    """mode: "special" or "regular"; eta_u: unlearning rate η_u (None: the paper's default
    for the mode); eta_r: η_r of PUF-Regular; regular_fraction: share of remaining clients
    in S_t^+; recovery_rounds: FedAvg rounds after the unlearning round (None: ⌈T/10⌉);
    seed: for the random S_t^+ when regular_fraction < 1."""

    mode: str = "special"
    eta_u: float | None = None
    eta_r: float = 1.0
    regular_fraction: float = 1.0
    recovery_rounds: int | None = None
    seed: int = 0

    def check(self) -> None:
        check_choice(NAME, "mode", self.mode, tuple(DEFAULT_ETA_U))
        if self.eta_u is not None:
            check_range(NAME, "eta_u", self.eta_u, 0.0, 1e6, low_open=True)
        check_range(NAME, "eta_r", self.eta_r, 0.0, 1e6)
        check_range(NAME, "regular_fraction", self.regular_fraction, 0.0, 1.0, low_open=True)
        if self.recovery_rounds is not None:
            check_range(NAME, "recovery_rounds", self.recovery_rounds, 0, 100_000)

    def unlearning_rate(self) -> float:
        return self.eta_u if self.eta_u is not None else DEFAULT_ETA_U[self.mode]


class PUFStrategy(BaselineStrategy):
    """Negated, scaled pseudo-gradients of the targets, then FedAvg recovery (module docstring)."""

    name = NAME
    requires_plaintext = False
    params_type = PUFParams

    def run(self, ctx: UnlearnContext) -> UnlearnResult:
        self.validate(ctx)
        params = parse_params(PUFParams, ctx.params, NAME)
        history = ctx.history
        last = history.num_rounds
        info = history.round_info(last)
        eta_u = params.unlearning_rate()
        recovery = params.recovery_rounds if params.recovery_rounds is not None else math.ceil(last / 10)
        remaining = [c for c in info.clients if c not in set(ctx.targets)]
        log = RunLog(ctx, NAME)
        model = history.model(last).clone()

        # Unlearning round (Algorithm 1, lines 5–18).
        regular = self._regular_set(params, remaining)
        ctx.progress("negation", 1, 1 + recovery)
        with log.step("fresh_gradients"):
            target_grads = log.fresh_gradients(model, 1, last, list(ctx.targets), "negation")
            plus_grads = log.fresh_gradients(model, 1, last, regular, "regular_round")
        if not target_grads:
            raise UnlearningError("PUF needs the target clients' last participation, and none answered")
        n = sum(_samples(history, c) for c in [*target_grads, *plus_grads])
        # Δ = η_r·Δ^+ − η_u·Δ^− with Δ^k = −η_l·g^k, i.e. w_ū = w_t − η_l·Σ_k s_k (n_k/n) g^k
        signed = {c: params.eta_r * _samples(history, c) / n for c in plus_grads}
        signed.update({c: -eta_u * _samples(history, c) / n for c in target_grads})
        with log.step("aggregate"):
            update = aggregate(ctx.backend, {**plus_grads, **target_grads}, signed)
        model = descend(model, update, info.lr)
        log.rounds_used += 1

        # Recovery: regular FedAvg rounds with the remaining clients.
        for r in range(1, recovery + 1):
            ctx.progress("recovery", 1 + r, 1 + recovery)
            with log.step("fresh_gradients"):
                grads = log.fresh_gradients(model, 1 + r, last, remaining, "recovery")
            if not grads:
                continue
            with log.step("aggregate"):
                update = aggregate(ctx.backend, grads, fedavg_weights(info, list(grads)))
            model = descend(model, update, info.lr)
            log.rounds_used += 1
        return UnlearnResult(
            model=model,
            report=log.report(
                params,
                mode=params.mode,
                eta_u=eta_u,
                recovery_rounds=recovery,
                regular_round_clients=regular,
                start_model_round=last,
            ),
        )

    @staticmethod
    def _regular_set(params: PUFParams, remaining: list[str]) -> list[str]:
        """S_t^+: empty for PUF-Special; for PUF-Regular all remaining clients, or a seeded
        random ⌈fraction·n⌉ of them (Algorithm 1, line 5)."""
        if params.mode == "special":
            return []
        if params.regular_fraction >= 1.0:
            return list(remaining)
        count = max(1, math.ceil(params.regular_fraction * len(remaining)))
        return sorted(random.Random(params.seed).sample(remaining, count))


def _samples(history: SharedHistory, client: str) -> int:
    """|D_k|: the client's sample count in the last round where it took part."""
    for i in range(history.num_rounds, 0, -1):
        info = history.round_info(i)
        if client in info.n_samples:
            return info.n_samples[client]
    raise UnlearningError(f"client {client!r} has no sample count in the history")
