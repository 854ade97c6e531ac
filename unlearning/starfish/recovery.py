"""Recovery rounds: plain FedAvg rounds with the remaining clients after the replay.

Algorithm 4 replays only T′ = ⌈σT⌉ of the T stored rounds from M_0, so M̂_{T′+1} has seen
fewer updates than the retrained model M_T (docs/QUALITY.md measures the gap). After the
replay, recovery round t = T′ + k (k = 1..R, R = `recovery_rounds`) asks every remaining
participant j of stored round r_k for its exact pseudo-gradient g^j at M̂_t (a client task
like a warm-up, data order of round r_k), reveals only the FedAvg aggregate
Ĝ_t = Σ_j n_j/Σ n · g^j and sets M̂_{t+1} = M̂_t − η_u·Ĝ_t, as a Stage I round would.

r_k runs through the rounds the replay skipped, in training order, then the replayed ones
(cyclically when R exceeds T). Every recovery round costs each remaining client one
computation, so it counts in T_r^j and lowers ARP by 1/T per round.

Release rule (docs/PRIVACY.md): Ĝ_t is an aggregate of exact gradients at M̂_t, so it is
revealed only when at least k = `min_cohort` principals answered (FedAvg weights capped at
1/k per principal, unlearning.weight_cap) and M̂_t is not a model Stage I
published (there a Stage I aggregate of the same gradients could be differenced with it, as at
the first replay); otherwise the round is "excluded" and M̂ stays. With DP, Ĝ_t is clipped
and noised like every aggregate (`reveal_aggregate` with the run's aggregator).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch

from mpc.backend import Secret
from unlearning.fedavg import capped_fedavg_weights, reveal_aggregate
from unlearning.starfish.params import StarfishParams
from unlearning.starfish.release import anchor_round
from unlearning.starfish.run_log import ReleaseEntry, RoundEntry
from unlearning.starfish.state import StarfishState
from unlearning.strategy import UnlearnContext
from unlearning.weight_cap import principal_count

#: ask(ctx, state, t, r, clients, reason) -> the answers received (StarfishStrategy._ask)
Ask = Callable[[UnlearnContext, StarfishState, int, int, Sequence[str], str], Mapping[str, Secret]]


def recovery_schedule(selected: Sequence[int], total: int, count: int) -> list[int]:
    """r_1..r_R: the stored rounds not replayed (training order), then the replayed ones, cyclically."""
    chosen = set(selected)
    order = [r for r in range(1, total + 1) if r not in chosen] + sorted(chosen)
    return [order[k % len(order)] for k in range(count)]


def recovery_round(ctx: UnlearnContext, params: StarfishParams, state: StarfishState, t: int, r: int, ask: Ask) -> None:
    """One recovery round t with the data order of stored round r (module docstring).

    A client that does not answer before the deadline is left out of the average (FedAvg
    over the answers); with no answer at all the round is logged "skipped".
    """
    info = ctx.history.round_info(r)
    members = set(state.clients)
    participants = [c for c in info.clients if c in members]
    ctx.progress("recovery", t, len(state.selected) + params.recovery_rounds, f"data order of round {r}")
    with ctx.backend.step("recovery"):
        answers = ask(ctx, state, t, r, participants, "recovery") if participants else {}
    answered = [c for c in participants if c in answers]
    if not answered:
        state.log.rounds.append(RoundEntry(t, r, 0, "skipped"))
        return
    weights = capped_fedavg_weights(info, answered, params.min_cohort)  # None: fewer than k principals
    if weights is None or anchor_round(ctx.history, state.model, params.min_step) is not None:
        state.log.rounds.append(RoundEntry(t, r, len(answered), "recovery"))
        cohort = principal_count(dict.fromkeys(answered, 1), info.principals)
        state.log.releases.append(ReleaseEntry(t, "excluded", [t], cohort))
        return
    with ctx.backend.step("UE"):
        stacked = ctx.backend.stack([answers[c] for c in answered], dim=0)
        row_weights = [weights[c] for c in answered]
        g_agg = reveal_aggregate(ctx.backend, stacked, row_weights, ctx.privacy, answered, f"stage2 recovery {t}")
    eta = params.unlearning_rate(info.lr)
    state.model = state.model - eta * g_agg.to(torch.float64)
    state.log.rounds.append(RoundEntry(t, r, len(answered), "recovery", eta))
