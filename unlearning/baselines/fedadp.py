"""FedADP: efficient federated unlearning with adaptive differential privacy
(FedADP paper, Algorithms 1 and 2).

What the paper does.
1. Adaptive DP in training (Algorithm 1, lines 8–12 and 25–26). Each round t the server
   sends a budget ε_t; clients clip their update to norm S and add Gaussian noise,
   g̃_t^c = g_t^c / max(1, ‖g_t^c‖/S) + N(0, σ_t²)  with  σ_t = S·√(2 ln(1.25/δ)) / ε_t
   (eq. (5)–(6)); after the round the budget follows the loss change,
   ε_{t+1} = min(max(ε_t·e^{Δloss}, ε_min), ε_max), Δloss = |loss_{t−1} − loss_t| (eq. (4)).
2. Dual-layer selection (Algorithm 1, lines 17–24; eq. (7)–(9)). Training is cut into
   windows that close when the loss falls to (1 − β) of the previous window's; in each
   window the server keeps the λ share of global models with the *least* alignment
   d(M_t, M_{t−1}) = ReLU(cos(M_t, M_{t−1})), and in each kept round the γ share of client
   updates with the *highest* cos(g̃_t^c, G_t).
3. Calibrated unlearning (Algorithm 2; eq. (10)–(12)). From M̂_0 = M̄_0 the kept rounds are
   replayed: the kept remaining clients compute ĝ_t^c at M̂_t, the server scales it by the
   direction consistency with the stored update,
   U_t^c = cos(ḡ_t^c, ĝ_t^c) · ‖ḡ_t^c‖/‖ĝ_t^c‖ · ĝ_t^c, aggregates by FedAvg over the kept
   remaining clients and sets M̂_{t+1} = M̂_t − η·U_t.
Paper settings (§VI-A1): β = 10 %, λ = 0.6, γ = 0.7, privacy budget 3.0 (ε_max).

What we implement. Steps 2 and 3 exactly, over the stored history, with losses from the
`ModelProbe`. Step 1 needs the uploads themselves to be noised. A history recorded with
FedADP's Algorithm 1 (the simulator's `upload_dp` setting runs `privatize` with the
budgets of `privacy.adaptive.next_budget` at upload time) declares it (`SharedHistory.upload_privacy`);
FedADP then needs `history_privatized=True` and reports the budgets the clients used.
`history_privatized=True` on a history that declares no privatization is refused, and so
is `history_privatized=False` on one that does (the noise would be added twice). On a
clean history with `dp=True` the strategy applies the mechanism to the stored updates
it reads, with the budgets the schedule gives along the stored trajectory — everything
FedADP stores and uses is privatized, but the stored global models came from clean
aggregates (a deviation, see docs/BASELINES.md). `dp=False` is the paper's "FedADP
without DP" ablation.

Deviations: the noise standard deviation is σ_t (the Gaussian mechanism with
sensitivity S); eq. (5) literally writes variance σ_t²S², which would count S twice.
The paper does not state S, δ, ε_0 or ε_min: defaults S = 1, δ = 1e-5, ε_0 = ε_min = 1.
Noise comes from seeded torch generators, one per (round, client) so re-reading a stored
update reproduces it (a reproducible simulation, not a CSPRNG: a deployment would draw
it on the client).
Per-client cosines and norms are plaintext: `requires_plaintext`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from privacy.adaptive import budget_schedule, noise_generator, noise_std, privatize
from unlearning.baselines.common import (
    RunLog,
    cosine,
    descend,
    loss_windows,
    plain,
    stored_plain,
    top_fraction,
)
from unlearning.fedavg import fedavg_weights
from unlearning.history import UploadPrivacy
from unlearning.probes import require_probe
from unlearning.strategy import Strategy, UnlearnContext, UnlearningError, UnlearnResult
from unlearning.strategy_params import StrategyParams, check_range

NAME = "fedadp"


@dataclass(frozen=True)
class FedADPParams(StrategyParams):
    """loss_reduction β, model_ratio λ, update_ratio γ (paper: 0.1, 0.6, 0.7); DP switches
    and the mechanism's S (clip_norm), δ (dp_delta), ε_0, ε_min, ε_max (paper: ε_max 3.0)."""

    loss_reduction: float = 0.1
    model_ratio: float = 0.6
    update_ratio: float = 0.7
    dp: bool = True
    history_privatized: bool = False
    clip_norm: float = 1.0
    dp_delta: float = 1e-5
    epsilon_0: float = 1.0
    epsilon_min: float = 1.0
    epsilon_max: float = 3.0
    seed: int = 0

    def check(self) -> None:
        check_range(NAME, "loss_reduction", self.loss_reduction, 0.0, 1.0, low_open=True, high_open=True)
        check_range(NAME, "model_ratio", self.model_ratio, 0.0, 1.0, low_open=True)
        check_range(NAME, "update_ratio", self.update_ratio, 0.0, 1.0, low_open=True)
        check_range(NAME, "clip_norm", self.clip_norm, 0.0, 1e12, low_open=True)
        check_range(NAME, "dp_delta", self.dp_delta, 0.0, 1.0, low_open=True, high_open=True)
        check_range(NAME, "epsilon_min", self.epsilon_min, 0.0, 1e6, low_open=True)
        check_range(NAME, "epsilon_max", self.epsilon_max, self.epsilon_min, 1e6)
        check_range(NAME, "epsilon_0", self.epsilon_0, self.epsilon_min, self.epsilon_max)
        if self.history_privatized and not self.dp:
            raise UnlearningError(f"{NAME}: history_privatized=True contradicts dp=False")


def alignment(current: torch.Tensor, previous: torch.Tensor) -> float:
    """d(M_t, M_{t−1}) = ReLU(cos(M_t, M_{t−1})) (eq. (7)–(8))."""
    return max(0.0, cosine(current.to(torch.float64), previous.to(torch.float64)))


def select_models(windows: Sequence[Sequence[int]], aligned: Mapping[int, float], ratio: float) -> list[int]:
    """Per window, the ⌈λB⌉ rounds whose model is least aligned with its predecessor."""
    chosen: list[int] = []
    for window in windows:
        chosen.extend(top_fraction({i: aligned[i] for i in window}, ratio, largest=False))
    return sorted(chosen)


def direction_calibrated_update(
    stored: Mapping[str, torch.Tensor], fresh: Mapping[str, torch.Tensor], weights: Mapping[str, float]
) -> torch.Tensor:
    """U = Σ_c w_c · cos(ḡ^c, ĝ^c)·‖ḡ^c‖/‖ĝ^c‖·ĝ^c (eq. (10)–(12))."""
    total = torch.zeros_like(next(iter(fresh.values())), dtype=torch.float64)
    for c, g_hat in fresh.items():
        norm_hat = float(g_hat.norm())
        if norm_hat > 0.0:
            scale = cosine(stored[c], g_hat) * float(stored[c].norm()) / norm_hat
            total += weights[c] * scale * g_hat.to(torch.float64)
    return total


def _budgets(
    params: FedADPParams, declared: UploadPrivacy | None, losses: Sequence[float]
) -> tuple[list[float], list[float], dict[str, object]]:
    """(ε_1..ε_T, σ_1..σ_T, description) of the mechanism behind the updates FedADP reads:
    the clients' own (declared by the history), the read-time schedule along the stored
    losses, or none (`dp=False`)."""
    if declared is not None:
        about = {"source": "uploads", "mechanism": declared.mechanism}
        about.update(clip_norm=declared.clip_norm, delta=declared.delta)
        return list(declared.budgets), list(declared.noise_std), about
    if not params.dp:
        return [], [], {"source": "none"}
    budgets = budget_schedule(losses, params.epsilon_0, params.epsilon_min, params.epsilon_max)
    stds = [noise_std(params.clip_norm, params.dp_delta, e) for e in budgets]
    about = {"source": "read_time", "mechanism": "gaussian", "clip_norm": params.clip_norm, "delta": params.dp_delta}
    return budgets, stds, about


class FedADPStrategy(Strategy[FedADPParams]):
    """Adaptive-DP storage, dual-layer selection and cosine-scaled calibration (module docstring)."""

    name = NAME
    requires_plaintext = True
    params_type = FedADPParams
    needs_probe = True

    def validate(self, ctx: UnlearnContext, params: FedADPParams) -> None:
        """The base checks, and `history_privatized` must match what the history declares."""
        super().validate(ctx, params)
        declared = ctx.history.upload_privacy()
        if params.history_privatized and declared is None:
            raise UnlearningError(
                f"{NAME}: history_privatized=True, but the history declares no privatized uploads "
                "(its uploads are clean); use history_privatized=False to privatize the stored updates at read time"
            )
        if declared is not None and not params.history_privatized:
            raise UnlearningError(
                f"{NAME}: the clients privatized this history's uploads ({declared.mechanism}, S = "
                f"{declared.clip_norm}, ε ≤ {max(declared.budgets, default=0.0):.3g}); pass dp=True and "
                "history_privatized=True (privatizing again would add the noise twice)"
            )
        if declared is not None and len(declared.budgets) != ctx.history.num_rounds:
            raise UnlearningError(
                f"{NAME}: the history declares {len(declared.budgets)} budgets for {ctx.history.num_rounds} rounds"
            )

    def unlearn(self, ctx: UnlearnContext, params: FedADPParams) -> UnlearnResult:
        probe = require_probe(ctx.probe, NAME)
        history, targets = ctx.history, set(ctx.targets)
        total = history.num_rounds
        log = RunLog(ctx, NAME)
        models = [history.model(i) for i in range(total + 1)]

        with log.step("selection"):
            losses = [probe.loss(m) for m in models]
            budgets, stds, privacy = _budgets(params, history.upload_privacy(), losses)
            windows = loss_windows(losses, params.loss_reduction)
            aligned = {i: alignment(models[i], models[i - 1]) for i in range(1, total + 1)}
            rounds = select_models(windows, aligned, params.model_ratio)
            kept: list[list[str]] = []
            for i in rounds:
                info = history.round_info(i)
                stored = self._stored_updates(ctx, params, stds, i, info.clients)
                aggregate = sum(w * stored[c] for c, w in fedavg_weights(info, info.clients).items())
                kept.append(top_fraction({c: cosine(g, aggregate) for c, g in stored.items()}, params.update_ratio))

        model = history.model(0).clone()
        for t, (i, chosen) in enumerate(zip(rounds, kept, strict=True), start=1):
            info = history.round_info(i)
            members = [c for c in chosen if c not in targets]
            ctx.progress("calibration", t, len(rounds), f"round {i}")
            with log.step("fresh_gradients"):
                fresh = {
                    c: plain(ctx.backend, g)
                    for c, g in log.fresh_gradients(model, t, i, members, "calibration").items()
                }
            if not fresh:
                continue
            stored = self._stored_updates(ctx, params, stds, i, list(fresh))
            update = direction_calibrated_update(stored, fresh, fedavg_weights(info, list(fresh)))
            model = descend(model, update, info.lr)
            log.rounds_used += 1

        return UnlearnResult(
            model=model,
            report=log.report(
                params,
                budgets=budgets,
                noise_std=stds,
                privacy=privacy,
                windows=[list(w) for w in windows],
                alignment={str(i): a for i, a in aligned.items()},
                selected_rounds=rounds,
                selected_clients={str(i): sorted(k) for i, k in zip(rounds, kept, strict=True)},
                start_model_round=0,
            ),
        )

    @staticmethod
    def _stored_updates(
        ctx: UnlearnContext, params: FedADPParams, stds: Sequence[float], i: int, clients: Sequence[str]
    ) -> dict[str, torch.Tensor]:
        """What FedADP stores for `clients` of round i: the uploads as recorded, or privatized
        here with round i's σ_i. The noise of (round, client) is drawn from its own seeded
        generator, so re-reading a stored update gives the same noised vector."""
        stored = stored_plain(ctx, i, clients)
        if not params.dp or params.history_privatized:
            return stored
        members = ctx.history.round_info(i).clients
        return {
            c: privatize(g, params.clip_norm, stds[i - 1], noise_generator(params.seed, i, members.index(c)))
            for c, g in stored.items()
        }
