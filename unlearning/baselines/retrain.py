"""Retrain from scratch: the gold standard every approximate method is compared with.

Starfish §V (baselines) and every seed paper use it: drop the target clients and run
FedAvg again from the initial model M_0 over the remaining clients,

    M̂_i = M̂_{i−1} − η_i · Σ_{j∈S_i∖C_t} (n_j / Σ_{k∈S_i∖C_t} n_k) · ĝ_i^j ,   i = 1..R,

where S_i and η_i are the membership and learning rate of stored round i (RoundInfo)
and ĝ_i^j is client j's fresh gradient at M̂_{i−1} (asked through the GradientOracle with
the data order of round i). R defaults to T, the number of stored rounds; rounds beyond T
reuse the last round's membership and learning rate.

Only backend operations are used (weighted sum of shared gradients, reveal of the
aggregate), so it runs on the secure backend as well; nothing but the aggregate, i.e.
the next public model, is revealed.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from unlearning.baselines.common import (
    RunLog,
    descend,
)
from unlearning.fedavg import fedavg_weights, reveal_client_aggregate
from unlearning.strategy import Strategy, UnlearnContext, UnlearnResult
from unlearning.strategy_params import StrategyParams, check_range

NAME = "retrain"


@dataclass(frozen=True)
class RetrainParams(StrategyParams):
    """rounds: R, number of FedAvg rounds (None: T, as many as were stored)."""

    rounds: int | None = None

    def check(self) -> None:
        if self.rounds is not None:
            check_range(NAME, "rounds", self.rounds, 1, 100_000)


def fedavg_from_scratch(ctx: UnlearnContext, log: RunLog, rounds: int, reason: str = "retrain") -> torch.Tensor:
    """Run `rounds` FedAvg rounds from M_0 over the remaining clients (see module docstring)."""
    history = ctx.history
    targets = set(ctx.targets)
    model = history.model(0).clone()
    for t in range(1, rounds + 1):
        original = min(t, history.num_rounds)
        info = history.round_info(original)
        members = [c for c in info.clients if c not in targets]
        ctx.progress(reason, t, rounds)
        with log.step("fresh_gradients"):
            grads = log.fresh_gradients(model, t, original, members, reason)
        if not grads:
            continue
        with log.step("aggregate"):
            weights = fedavg_weights(info, list(grads))
            update = reveal_client_aggregate(ctx.backend, grads, weights, ctx.privacy, f"retrain round {t}")
        model = descend(model, update, info.lr)
        log.rounds_used += 1
    return model


class RetrainStrategy(Strategy[RetrainParams]):
    """FedAvg from M_0 over the remaining clients (see module docstring)."""

    name = NAME
    requires_plaintext = False
    params_type = RetrainParams

    def unlearn(self, ctx: UnlearnContext, params: RetrainParams) -> UnlearnResult:
        rounds = params.rounds if params.rounds is not None else ctx.history.num_rounds
        log = RunLog(ctx, NAME)
        model = fedavg_from_scratch(ctx, log, rounds)
        return UnlearnResult(model=model, report=log.report(params, start_model_round=0))
