"""PUF: federated unlearning via negated pseudo-gradients (PUF paper, Algorithm 1).

What the paper does. A client's FedAvg update is a pseudo-gradient, Δ_t^k = w^k − w_t
(eq. (2)). To forget the target clients S_t^−, PUF lets them train one last time from
the current global model w_t and applies their aggregate update with its sign flipped
and scaled by the unlearning rate η_u (Algorithm 1, lines 13–18):

* PUF-Special (eq. (9)): a dedicated round with the targets only,
  w_ū = w_t − η_u·Δ_t^−,  Δ_t^− = (1/n) Σ_{j∈S_t^−} |D_j| Δ_t^j,  n = Σ_{j∈S_t^−} |D_j|;
* PUF-Regular (eq. (4)–(8)): a regular round in which remaining clients S_t^+ also train,
  w_ū = w_t + η_r·Δ_t^+ − η_u·Δ_t^−, with n summing over S_t^+ ∪ S_t^−.

The targets train E_u local epochs in that round (§V-E, Figure 5; E_u = 1 = E by default).
Regular FedAvg training then resumes from w_ū with the remaining clients ("recovery"),
until the unlearned model first reaches the retrained model's test accuracy (§V-D).
Paper defaults (η_s = 1): η_u = 2 for PUF-Special, η_u = 20 and η_r = 1 for PUF-Regular.
The paper's "Natural" baseline (§V-B) skips the unlearning and only recovers: η_u = 0.

What we implement. w_t = M_T, the last stored model. Clients upload pseudo-gradients
g = (w_t − w^k)/η_l (docs/SERVICE.md, "What a client uploads"), so Δ^k = −η_l·g^k with
η_l the learning rate of round T; the targets' and the remaining clients' g are fresh
answers of the GradientOracle at M_T (the targets with `local_epochs` = E_u when given). The signed weighted sum is
aggregated under the backend and only the aggregate (the public model change) is
revealed, so PUF runs on the secure backend too. Recovery rounds are FedAvg rounds over
the remaining members of round T (its learning rate and weights); every round after T
is a new FL round, so its clients draw a fresh data order (`fresh_order`). With
`stop_accuracy` (the retrained model's accuracy on the probe set) recovery stops before
the first round at which the model's probe accuracy has reached it, after at most
`recovery_rounds` (default 30) rounds; without it a fixed ⌈T/10⌉ rounds run.

In PUF-Regular every remaining client of round T joins S_t^+ unless `regular_fraction`
< 1, in which case a seeded random subset is drawn. With η_u = 0 the targets are not
asked; PUF-Special then has no unlearning round at all.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import torch

from mpc.backend import Secret
from unlearning.baselines.common import (
    RunLog,
    descend,
)
from unlearning.fedavg import fedavg_weights, reveal_client_aggregate
from unlearning.history import SharedHistory
from unlearning.probes import ModelProbe, require_probe
from unlearning.strategy import Strategy, UnlearnContext, UnlearningError, UnlearnResult
from unlearning.strategy_params import StrategyParams, check_choice, check_range

NAME = "puf"
#: paper defaults for η_u per operating mode (PUF §V-A)
DEFAULT_ETA_U = {"special": 2.0, "regular": 20.0}
#: recovery-round cap of the stopping rule (ours; the paper stops only on accuracy)
MAX_RECOVERY_ROUNDS = 30


@dataclass(frozen=True)
class PUFParams(StrategyParams):
    """mode: "special" or "regular"; eta_u: unlearning rate η_u (None: the paper's default
    for the mode; 0: no unlearning, recovery only); eta_r: η_r of PUF-Regular;
    regular_fraction: share of remaining clients in S_t^+; unlearning_epochs: E_u, the
    targets' local epochs in the unlearning round (None: their regular training);
    recovery_rounds: FedAvg rounds after the unlearning round, or their maximum with
    stop_accuracy (None: ⌈T/10⌉, or 30 with stop_accuracy); stop_accuracy: end recovery
    once the probe accuracy reaches it (the retrained model's); seed: for the random S_t^+."""

    mode: str = "special"
    eta_u: float | None = None
    eta_r: float = 1.0
    regular_fraction: float = 1.0
    unlearning_epochs: int | None = None
    recovery_rounds: int | None = None
    stop_accuracy: float | None = None
    seed: int = 0

    def check(self) -> None:
        check_choice(NAME, "mode", self.mode, tuple(DEFAULT_ETA_U))
        if self.eta_u is not None:
            check_range(NAME, "eta_u", self.eta_u, 0.0, 1e6)
        check_range(NAME, "eta_r", self.eta_r, 0.0, 1e6)
        check_range(NAME, "regular_fraction", self.regular_fraction, 0.0, 1.0, low_open=True)
        if self.unlearning_epochs is not None:
            check_range(NAME, "unlearning_epochs", self.unlearning_epochs, 1, 10_000)
        if self.recovery_rounds is not None:
            check_range(NAME, "recovery_rounds", self.recovery_rounds, 0, 100_000)
        if self.stop_accuracy is not None:
            check_range(NAME, "stop_accuracy", self.stop_accuracy, 0.0, 1.0)

    def unlearning_rate(self) -> float:
        return self.eta_u if self.eta_u is not None else DEFAULT_ETA_U[self.mode]

    def recovery_limit(self, stored_rounds: int) -> int:
        if self.recovery_rounds is not None:
            return self.recovery_rounds
        return MAX_RECOVERY_ROUNDS if self.stop_accuracy is not None else math.ceil(stored_rounds / 10)


@dataclass
class Recovery:
    """The model during recovery, its probe accuracies (after unlearning, then after each
    recovery round), the rounds run and why recovery ended ("accuracy", "limit" or "fixed")."""

    model: torch.Tensor
    accuracies: list[float]
    rounds: int = 0
    stopped_by: str = "fixed"

    def reached(self, target: float | None) -> bool:
        """Whether the last accuracy reaches `target` (records it as the reason to stop)."""
        if target is None:
            return False
        self.stopped_by = "accuracy" if self.accuracies[-1] >= target else "limit"
        return self.stopped_by == "accuracy"


class PUFStrategy(Strategy[PUFParams]):
    """Negated, scaled pseudo-gradients of the targets, then FedAvg recovery (module docstring)."""

    name = NAME
    requires_plaintext = False
    params_type = PUFParams

    def validate(self, ctx: UnlearnContext, params: PUFParams) -> None:
        """The base checks, and a probe when the stopping rule needs accuracies."""
        super().validate(ctx, params)
        if params.stop_accuracy is not None:
            require_probe(ctx.probe, NAME)

    def unlearn(self, ctx: UnlearnContext, params: PUFParams) -> UnlearnResult:
        history = ctx.history
        last = history.num_rounds
        remaining = [c for c in history.round_info(last).clients if c not in set(ctx.targets)]
        regular = self._regular_set(params, remaining)
        log = RunLog(ctx, NAME)
        unlearned = self._unlearning_round(ctx, params, log, regular)
        recovery = self._recover(ctx, params, log, unlearned, remaining)
        return UnlearnResult(
            model=recovery.model,
            report=log.report(
                params,
                mode=params.mode,
                eta_u=params.unlearning_rate(),
                unlearning_epochs=params.unlearning_epochs,
                recovery_rounds=recovery.rounds,
                recovery_limit=params.recovery_limit(last),
                recovery_accuracy=recovery.accuracies,
                stopped_by=recovery.stopped_by,
                regular_round_clients=regular,
                start_model_round=last,
            ),
        )

    @staticmethod
    def _has_unlearning_round(params: PUFParams) -> bool:
        return params.mode == "regular" or params.unlearning_rate() > 0.0

    def _unlearning_round(
        self, ctx: UnlearnContext, params: PUFParams, log: RunLog, regular: list[str]
    ) -> torch.Tensor:
        """w_ū = w_t + Δ_t with Δ_t = η_r·Δ^+ − η_u·Δ^− (eq. (7)–(9); Algorithm 1, lines 5–18)."""
        history = ctx.history
        last = history.num_rounds
        model = history.model(last).clone()
        if not self._has_unlearning_round(params):
            return model
        eta_u = params.unlearning_rate()
        ctx.progress("negation", 1, 1)
        with log.step("fresh_gradients"):
            targets = list(ctx.targets) if eta_u > 0.0 else []
            target_grads = self._ask(log, model, 1, targets, "negation", params.unlearning_epochs)
            plus_grads = self._ask(log, model, 1, regular, "regular_round", None)
        if targets and not target_grads:
            raise UnlearningError("PUF needs the target clients' last participation, and none answered")
        if not target_grads and not plus_grads:
            return model
        n = sum(_samples(history, c) for c in [*target_grads, *plus_grads])
        # Δ = η_r·Δ^+ − η_u·Δ^− with Δ^k = −η_l·g^k, i.e. w_ū = w_t − η_l·Σ_k s_k (n_k/n) g^k
        signed = {c: params.eta_r * _samples(history, c) / n for c in plus_grads}
        signed.update({c: -eta_u * _samples(history, c) / n for c in target_grads})
        with log.step("aggregate"):
            both = {**plus_grads, **target_grads}
            update = reveal_client_aggregate(ctx.backend, both, signed, ctx.privacy, "puf negation")
        log.rounds_used += 1
        return descend(model, update, history.round_info(last).lr)

    def _recover(
        self, ctx: UnlearnContext, params: PUFParams, log: RunLog, model: torch.Tensor, remaining: list[str]
    ) -> Recovery:
        """FedAvg rounds over the remaining clients, each with a fresh data order, until the
        probe accuracy reaches `stop_accuracy` (PUF §V-D) or the limit is spent."""
        info = ctx.history.round_info(ctx.history.num_rounds)
        limit = params.recovery_limit(ctx.history.num_rounds)
        probe: ModelProbe | None = ctx.probe if params.stop_accuracy is not None else None
        out = Recovery(model, accuracies=[] if probe is None else [probe.accuracy(model)])
        for r in range(1, limit + 1):
            if out.reached(params.stop_accuracy):
                return out
            ctx.progress("recovery", r, limit)
            with log.step("fresh_gradients"):
                grads = self._ask(log, out.model, 1 + r, remaining, "recovery", None)
            if grads:
                with log.step("aggregate"):
                    weights = fedavg_weights(info, list(grads))
                    update = reveal_client_aggregate(ctx.backend, grads, weights, ctx.privacy, f"puf recovery {r}")
                out.model = descend(out.model, update, info.lr)
                out.rounds += 1
                log.rounds_used += 1
            if probe is not None:
                out.accuracies.append(probe.accuracy(out.model))
        out.reached(params.stop_accuracy)
        return out

    @staticmethod
    def _ask(
        log: RunLog, model: torch.Tensor, t: int, clients: list[str], reason: str, epochs: int | None
    ) -> dict[str, Secret]:
        """Fresh pseudo-gradients of a new FL round after T (fresh data order)."""
        last = log.ctx.history.num_rounds
        return log.fresh_gradients(model, t, last, clients, reason, local_epochs=epochs, fresh_order=True)

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
