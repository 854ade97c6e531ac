"""FedEraser (Liu et al., IWQoS 2021): calibrate retained client updates with a few
rounds of fresh training by the remaining clients.

What the paper does. During training the server retains every client's update at
rounds t_1 = 1, t_1 + Δt, t_1 + 2Δt, … (retaining interval Δt). To forget a client it
replays only those K = ⌈T/Δt⌉ retained rounds from the initial model:

* the first retained round needs no client work: the remaining clients' updates of t_1
  were computed at M_0, which the target has not influenced, so
  M̃_1 = M_0 − η·Σ_c w_c g_{t_1}^c;
* at every later retained round t_j the remaining clients run calibration training at
  M̃_{j−1} and send Û^c = −η ĝ^c; the server keeps the *length* of the retained update
  and the *direction* of the fresh one, Ũ^c = ‖U_{t_j}^c‖ · Û^c / ‖Û^c‖, and
  M̃_j = M̃_{j−1} + Σ_c w_c Ũ^c  (FedAvg weights w_c over the remaining clients).

What we implement. Exactly the replay above over the stored history: retained rounds
1, 1 + Δt, …; fresh gradients come from the GradientOracle (original round t_j's data
order); weights n_c/Σn over the remaining members of t_j that answered. The paper's
calibration training runs fewer local epochs than the original training (calibration
ratio r = E_cali/E = 0.5): `calibration_epochs` asks the clients for E_cali local epochs
(`GradientRequest.local_epochs`); by default they run their regular training (r = 1),
since the strategy does not know E.

Deviations (see docs/BASELINES.md): the paper's code normalises per layer; flat models
carry no layer boundaries, so the norm is over the whole vector. Norms and directions
are per-client plaintext quantities: `requires_plaintext`.
"""

from __future__ import annotations

from dataclasses import dataclass

from unlearning.baselines.common import (
    RunLog,
    descend,
    norm_calibrated_update,
    plain,
    stored_plain,
)
from unlearning.fedavg import fedavg_weights
from unlearning.strategy import Strategy, UnlearnContext, UnlearnResult
from unlearning.strategy_params import StrategyParams, check_range

NAME = "federaser"


@dataclass(frozen=True)
class FedEraserParams(StrategyParams):
    """interval: Δt, the retaining interval (FedEraser's default 2); calibration_epochs:
    E_cali, the clients' local epochs in calibration training (None: their regular E)."""

    interval: int = 2
    calibration_epochs: int | None = None

    def check(self) -> None:
        check_range(NAME, "interval", self.interval, 1, 100_000)
        if self.calibration_epochs is not None:
            check_range(NAME, "calibration_epochs", self.calibration_epochs, 1, 10_000)


class FedEraserStrategy(Strategy[FedEraserParams]):
    """Replay of the retained rounds with norm-calibrated fresh updates (module docstring)."""

    name = NAME
    requires_plaintext = True
    params_type = FedEraserParams

    def unlearn(self, ctx: UnlearnContext, params: FedEraserParams) -> UnlearnResult:
        history, targets = ctx.history, set(ctx.targets)
        retained = list(range(1, history.num_rounds + 1, params.interval))
        log = RunLog(ctx, NAME)
        model = history.model(0).clone()
        for j, t in enumerate(retained, start=1):
            info = history.round_info(t)
            members = [c for c in info.clients if c not in targets]
            ctx.progress("calibration", j, len(retained))
            with log.step("stored_gradients"):
                stored = stored_plain(ctx, t, members)
            if j == 1:
                # M_0 is untouched by the target: aggregate the retained updates directly.
                update = sum(w * stored[c] for c, w in fedavg_weights(info, members).items())
            else:
                with log.step("fresh_gradients"):
                    fresh = {
                        c: plain(ctx.backend, g)
                        for c, g in log.fresh_gradients(
                            model, j, t, members, "calibration", local_epochs=params.calibration_epochs
                        ).items()
                    }
                if not fresh:
                    continue
                norms = {c: float(stored[c].norm()) for c in fresh}
                update = norm_calibrated_update(norms, fresh, fedavg_weights(info, list(fresh)))
            model = descend(model, update, info.lr)
            log.rounds_used += 1
        return UnlearnResult(model=model, report=log.report(params, retained_rounds=retained, start_model_round=0))
