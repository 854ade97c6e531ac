"""Crab: efficient and certified recovery with selective storage and adaptive rollback
(Crab paper, Algorithms 1 and 2).

What the paper does.
1. Selective storage during training (Algorithm 1, "SelectStore"). Training is cut into
   time windows: a window closes when the loss has dropped by a rate α since the previous
   window's end, F(M_{t+1}) ≤ (1 − α)·prev_loss (Algorithm 2, line 12). In every window of
   B_b rounds the server keeps the P_b = λ·B_b rounds whose consecutive global models
   differ most, measured by the KL divergence of the models' output distributions on the
   data, D(M_{b,i}, M_{b,i+1}) = Σ p(M_{b,i}) log(p(M_{b,i}) / p(M_{b,i+1})) (eq. (1);
   Algorithm 1, lines 2–5). In every kept round it keeps only the X = δ·C clients whose
   update is most aligned with the aggregate, by the contribution score
   T(g^c, G) = ⟨g^c, G⟩ / (‖g^c‖‖G‖) (eq. (2); Algorithm 1, lines 6–11).
2. Adaptive rollback (Algorithm 2, lines 20–22). The influence of a client set on the
   kept round t_j is I(C_{t_j}) = Σ_{c∈C} |D_c|/|D_{t_j}| · [ḡ^c_{t_j} − Ḡ_{t_{j−1}}] (eq. (3));
   the sensitivity to the targets C_u is S(C_u, j) = Σ_j ‖I(C_{t_j}) − I(C^−_{t_j})‖
   (eq. (4), C^− = C ∖ C_u); the threshold Φ(j) = β Σ_j I(C^−_{t_j}) (eq. (5)); the
   rollback point is j* = argmax_j (S(C_u, j) ≤ Φ(j)) (eq. (6)).
3. Recovery (Algorithm 2, lines 24–32) from M̃_0 = M̄_{t_{j*}}: for each later kept round,
   the kept benign clients train at M̃_r and the server calibrates their fresh update to
   the stored length, Ũ^c = ‖U^c_{t_j}‖ · Û^c/‖Û^c‖ (eq. (8)), aggregates by FedAvg
   (eq. (9)) and updates M̃_{r+1} = M̃_r + Ũ_r (eq. (10)).

What we implement. All three steps over the stored history (our service stores every
round, so selective storage is applied when the request arrives, which selects the same
rounds and clients). p(M) and F(M) come from the `ModelProbe` (unlearning/probes.py).
Aggregates G_i are the public model differences (M_{i−1} − M_i)/η_i. Fresh updates
come from the GradientOracle (data order of the replayed round); the calibrated step
is M̃ ← M̃ − η_{t_j} Σ_c w_c ‖g^c‖/‖ĝ^c‖ ĝ^c with w over the kept benign clients.

Interpretations (docs/BASELINES.md): D is eq. (1)'s explicit sum (its KL[·||·] notation
names the arguments the other way round), averaged over probe samples; window sizes are
rounded up, P_b = ⌈λB_b⌉ (at least one round per window), X = ⌈δC⌉; rounds still open
when training ended form a last window; Ḡ_{t_0} = 0; eq. (5) sums norms, Φ(j) =
β Σ_{j'≤j} ‖I(C^−_{t_{j'}})‖, and both eq. (4) and eq. (5) are cumulative up to j; each set
in eq. (3) is normalised by its own data size; no j satisfying eq. (6) means rollback
to M_0; recovery replays the kept rounds after t_{j*}. Per-client norms and cosines are
plaintext: `requires_plaintext`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Iterator, Mapping, Sequence

import torch

from unlearning.baselines.common import (
    BaselineStrategy,
    RunLog,
    check_range,
    cosine,
    descend,
    fedavg_weights,
    loss_windows,
    norm_calibrated_update,
    parse_params,
    plain,
    stored_plain,
    stored_round_update,
    top_fraction,
)
from unlearning.probes import ModelProbe, require_probe
from unlearning.strategy import UnlearnContext, UnlearnResult

NAME = "crab"


@dataclass(frozen=True)
class CrabParams:
    """Paper defaults (§V-A): loss_reduction α = 0.1, round_ratio λ = 0.6,
    client_ratio δ = 0.7, sensitivity_ratio β = 0.3."""

    loss_reduction: float = 0.1
    round_ratio: float = 0.6
    client_ratio: float = 0.7
    sensitivity_ratio: float = 0.3

    def check(self) -> None:
        check_range(NAME, "loss_reduction", self.loss_reduction, 0.0, 1.0, low_open=True, high_open=True)
        check_range(NAME, "round_ratio", self.round_ratio, 0.0, 1.0, low_open=True)
        check_range(NAME, "client_ratio", self.client_ratio, 0.0, 1.0, low_open=True)
        check_range(NAME, "sensitivity_ratio", self.sensitivity_ratio, 0.0, 1e6)


def kl_divergence(p: torch.Tensor, q: torch.Tensor, eps: float = 1e-12) -> float:
    """Eq. (1): mean over samples of Σ_k p_k log(p_k / q_k) (p, q: (n, classes))."""
    p64, q64 = p.to(torch.float64).clamp_min(eps), q.to(torch.float64).clamp_min(eps)
    return float((p64 * (p64.log() - q64.log())).sum(dim=1).mean())


def round_divergences(probe: ModelProbe, models: Sequence[torch.Tensor]) -> dict[int, float]:
    """D(M_{i−1}, M_i) for every stored round i = 1..T (Algorithm 1, lines 2–4)."""
    probs = [probe.probabilities(m) for m in models]
    return {i: kl_divergence(probs[i - 1], probs[i]) for i in range(1, len(models))}


def select_rounds(windows: Sequence[Sequence[int]], scores: Mapping[int, float], ratio: float) -> list[int]:
    """Per window, the ⌈λB_b⌉ rounds with the largest divergence (Algorithm 1, line 5)."""
    chosen: list[int] = []
    for window in windows:
        chosen.extend(top_fraction({i: scores[i] for i in window}, ratio))
    return sorted(chosen)


def select_clients(grads: Mapping[str, torch.Tensor], aggregate: torch.Tensor, ratio: float) -> list[str]:
    """The ⌈δC⌉ clients with the highest contribution score cos(g^c, G) (eq. (2))."""
    return top_fraction({c: cosine(g, aggregate) for c, g in grads.items()}, ratio)


def weighted_mean(grads: Mapping[str, torch.Tensor], n_samples: Mapping[str, int], dim: int) -> torch.Tensor:
    """Σ_c |D_c|/|D_C| g^c over the given clients (zero vector for an empty set)."""
    if not grads:
        return torch.zeros(dim, dtype=torch.float64)
    total = sum(n_samples[c] for c in grads)
    return sum(n_samples[c] / total * g for c, g in grads.items())


def rollback_index(
    kept: Iterable[Mapping[str, torch.Tensor]],
    n_samples: Sequence[Mapping[str, int]],
    targets: set[str],
    beta: float,
    dim: int,
) -> tuple[int, list[float], list[float]]:
    """j* of eq. (6) with S (eq. (4)) and Φ (eq. (5)) for kept rounds j = 1..T′.

    `kept` yields, for each kept round t_j in order, its kept clients' gradients (it may
    be a generator, so only one round is in memory). Returns (j*, S, Φ), j* = 0 when no
    j satisfies S(j) ≤ Φ(j)."""
    previous = torch.zeros(dim, dtype=torch.float64)
    s_total = phi_total = 0.0
    s_curve: list[float] = []
    phi_curve: list[float] = []
    best = 0
    for j, (grads, counts) in enumerate(zip(kept, n_samples), start=1):
        benign = {c: g for c, g in grads.items() if c not in targets}
        mean_all = weighted_mean(grads, counts, dim)
        influence_all = mean_all - previous  # eq. (3), C_{t_j}
        influence_benign = weighted_mean(benign, counts, dim) - previous  # eq. (3), C^−_{t_j}
        s_total += float((influence_all - influence_benign).norm())
        phi_total += float(influence_benign.norm())
        s_curve.append(s_total)
        phi_curve.append(beta * phi_total)
        if s_total <= beta * phi_total:
            best = j
        previous = mean_all
    return best, s_curve, phi_curve


def _stored_fraction(ctx: UnlearnContext, kept: Sequence[Mapping[str, float]]) -> float:
    """Share of all stored client uploads that selective storage keeps (memory saving)."""
    uploads = sum(len(ctx.history.round_info(i).clients) for i in range(1, ctx.history.num_rounds + 1))
    return math.fsum(len(k) for k in kept) / max(1, uploads)


class CrabStrategy(BaselineStrategy):
    """Selective storage, adaptive rollback and calibrated recovery (module docstring)."""

    name = NAME
    requires_plaintext = True
    params_type = CrabParams
    needs_probe = True

    def run(self, ctx: UnlearnContext) -> UnlearnResult:
        self.validate(ctx)
        params = parse_params(CrabParams, ctx.params, NAME)
        probe = require_probe(ctx, NAME)
        history, targets = ctx.history, set(ctx.targets)
        total = history.num_rounds
        log = RunLog(ctx, NAME)
        models = [history.model(i) for i in range(total + 1)]

        ctx.progress("round_selection", 0, total)
        with log.step("selective_storage"):
            windows = loss_windows([probe.loss(m) for m in models], params.loss_reduction)
            divergences = round_divergences(probe, models)
            rounds = select_rounds(windows, divergences, params.round_ratio)
        # kept[j] maps the kept clients of round t_j to ‖g‖, all that recovery needs (eq. (8))
        kept: list[dict[str, float]] = []

        def kept_gradients() -> Iterator[dict[str, torch.Tensor]]:
            for i in rounds:
                grads = stored_plain(ctx, i, history.round_info(i).clients)
                chosen = select_clients(grads, stored_round_update(ctx, i), params.client_ratio)
                kept.append({c: float(grads[c].norm()) for c in chosen})
                yield {c: grads[c] for c in chosen}

        with log.step("rollback"):
            counts = [history.round_info(i).n_samples for i in rounds]
            j_star, sensitivity, threshold = rollback_index(
                kept_gradients(), counts, targets, params.sensitivity_ratio, models[0].numel()
            )
        rollback_round = rounds[j_star - 1] if j_star > 0 else 0
        model = history.model(rollback_round).clone()

        replay = list(range(j_star + 1, len(rounds) + 1))
        for r, j in enumerate(replay, start=1):
            t = rounds[j - 1]
            info = history.round_info(t)
            benign = [c for c in kept[j - 1] if c not in targets]
            ctx.progress("recovery", r, len(replay), f"round {t}")
            with log.step("fresh_gradients"):
                fresh = {
                    c: plain(ctx.backend, g) for c, g in log.fresh_gradients(model, r, t, benign, "recovery").items()
                }
            if not fresh:
                continue
            update = norm_calibrated_update(kept[j - 1], fresh, fedavg_weights(info, list(fresh)))
            model = descend(model, update, info.lr)
            log.rounds_used += 1

        return UnlearnResult(
            model=model,
            report=log.report(
                params,
                windows=[list(w) for w in windows],
                divergences={str(i): d for i, d in divergences.items()},
                selected_rounds=rounds,
                selected_clients={str(i): sorted(k) for i, k in zip(rounds, kept)},
                sensitivity=sensitivity,
                sensitivity_threshold=threshold,
                rollback_round=rollback_round,
                recovery_rounds=[rounds[j - 1] for j in replay],
                start_model_round=rollback_round,
                stored_fraction=_stored_fraction(ctx, kept),
            ),
        )
