"""Algorithm 4 (Stage II) of Starfish as an unlearning `Strategy`.

1. Threshold determination: [δ^j] = SecMax over stored rounds (thresholds.py).
2. Round selection: SecRS / SecRS(alt), top T′ = ⌈σT⌉ rounds revealed (secrs.py; a
   `RoundSelector` the strategy is given).
3. For t = 1..T′, replaying stored round r = t-th selected round in training order:
   * a degenerate round (s = M̂_t − M_{r−1} = 0, e.g. t = 1 replaying round 1) uses the
     stored uploads, which are the exact gradients at M̂_t: no client is asked;
   * warm-up (the first B rounds whose step s is non-zero): remaining clients compute
     exact gradients at M̂_t;
   * otherwise SecUE: ĝ^j = g_r^j + H^j(M̂_t − M_{r−1}) with compact L-BFGS (secue.py);
     every T_c = ⌈βT⌉-th round SecTC flags clients and flagged clients are corrected
     (correction.py);
   * Ĝ_t = FedAvg(ĝ) is revealed and M̂_{t+1} = M̂_t − η_u·Ĝ_t.
4. Optional recovery rounds t = T′+1..T′+R: exact FedAvg rounds with the remaining
   clients (recovery.py).
   After each round the state is checkpointed through `ctx.on_checkpoint`; the report is
   built from the run's typed log (run_log.py, run_report.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from mpc.backend import Backend, Secret
from mpc.costs import CostLedger
from unlearning.fedavg import fedavg_weights, reveal_aggregate
from unlearning.history import GradientRequest
from unlearning.starfish.correction import check_sample, flags_for, replace_rows
from unlearning.starfish.params import StarfishParams
from unlearning.starfish.recovery import recovery_round, recovery_schedule
from unlearning.starfish.run_log import FlagEntry, RoundEntry, StarfishLog
from unlearning.starfish.run_report import build_report
from unlearning.starfish.secrs import RoundSelector, SecRSSelector
from unlearning.starfish.secue import add_pairs, estimate_gradients
from unlearning.starfish.state import StarfishState
from unlearning.starfish.thresholds import determine_thresholds
from unlearning.strategy import Strategy, UnlearnContext, UnlearningError, UnlearnResult


@dataclass(frozen=True)
class _Replay:
    """Inputs of unlearning round t: replayed stored round r, its remaining participants,
    their stored gradients [g_r^j] (n, m) and reported norms [‖g_r^j‖] (n,), and the public
    step v = M̂_t − M_{r−1}."""

    t: int
    r: int
    participants: list[str]
    stored: Secret
    norms: Secret
    v: torch.Tensor


class StarfishStrategy(Strategy[StarfishParams]):
    """Privacy-preserving federated unlearning by Starfish (runs on any `Backend`).

    `selector` picks the replayed rounds: SecRS by default; the random-selection baseline
    passes its own (`unlearning.baselines.random_selection`).
    """

    name = "starfish"
    params_type = StarfishParams
    resumable = True

    def __init__(self, selector: RoundSelector | None = None) -> None:
        self.selector = selector if selector is not None else SecRSSelector()

    def validate(self, ctx: UnlearnContext, params: StarfishParams) -> None:
        super().validate(ctx, params)
        if ctx.history.num_rounds < 1:
            raise UnlearningError("the history holds no stored round")
        if ctx.resume_from is not None:
            self._check_resume(ctx, params, ctx.resume_from)

    def unlearn(self, ctx: UnlearnContext, params: StarfishParams) -> UnlearnResult:
        """Run (or resume) Algorithm 4; the report's costs cover this call only.

        The call's costs are also added to `ctx.backend.ledger` (a long-lived backend keeps
        its cumulative totals).
        """
        outer, run_ledger = ctx.backend.ledger, CostLedger()
        ctx.backend.ledger = run_ledger
        try:
            state = self._execute(ctx, params)
        finally:
            ctx.backend.ledger = outer
            outer.merge(run_ledger)
        total = ctx.history.num_rounds
        eta = params.unlearning_rate(ctx.history.round_info(state.selected[0]).lr)
        report = build_report(self.name, ctx.backend.name, params, state, total, eta)
        report["costs"] = run_ledger.to_dict()
        return UnlearnResult(model=state.model.to(torch.float32), report=report)

    @classmethod
    def restore_state(
        cls, public: Mapping[str, Any], tensors: Mapping[str, torch.Tensor], secrets: Mapping[str, Secret]
    ) -> StarfishState:
        """The `StarfishState` a checkpoint stored (raises `UnlearningError` when a part is missing)."""
        try:
            return StarfishState.from_parts(public, tensors, secrets)
        except ValueError as exc:
            raise UnlearningError(str(exc)) from None

    def _execute(self, ctx: UnlearnContext, params: StarfishParams) -> StarfishState:
        total = ctx.history.num_rounds
        if isinstance(ctx.resume_from, StarfishState):
            state = ctx.resume_from.snapshot()
            state.log.resumed_at.append(state.round)
        else:
            state = self._start(ctx, params)
        selected = len(state.ranked)
        last = selected + params.recovery_rounds
        interval = params.check_interval(total)
        recovery = recovery_schedule(state.selected, total, params.recovery_rounds)
        for t in range(state.round + 1, last + 1):
            if t <= selected:
                self._unlearning_round(ctx, params, state, t, interval)
            else:
                recovery_round(ctx, params, state, t, recovery[t - selected - 1], self._ask)
            state.round = t
            if ctx.on_checkpoint is not None:
                ctx.on_checkpoint(state.snapshot())
        ctx.progress("done", last, last)
        return state

    # ------------------------------------------------------------------ stages
    def _start(self, ctx: UnlearnContext, params: StarfishParams) -> StarfishState:
        """Threshold determination and round selection (Algorithm 4 steps 1–2)."""
        backend, history = ctx.backend, ctx.history
        total = history.num_rounds
        count = params.selected_count(total)
        remaining = tuple(ctx.remaining_clients())
        ctx.progress("threshold", 0, count, f"{len(remaining)} remaining clients")
        with backend.step("TD"):
            deltas = determine_thresholds(backend, history, remaining)
        ctx.progress("round_selection", 0, count, f"T={total}, T'={count}, {self.selector.label}")
        selection = self.selector.select(ctx, params, count)
        return StarfishState(
            clients=remaining,
            ranked=selection.ranked,
            method=selection.method,
            deltas=deltas,
            model=history.model(0).to(torch.float64).clone(),
            log=StarfishLog(request=_request(ctx, params)),
        )

    def _unlearning_round(
        self, ctx: UnlearnContext, params: StarfishParams, state: StarfishState, t: int, interval: int
    ) -> None:
        """One iteration of Algorithm 4 lines 15–20, replaying the t-th selected round."""
        history = ctx.history
        r = state.selected[t - 1]
        info = history.round_info(r)
        members = set(state.clients)
        participants = [c for c in info.clients if c in members]
        if not participants:
            state.log.rounds.append(RoundEntry(t, r, 0, "skipped"))
            return
        step = _Replay(
            t=t,
            r=r,
            participants=participants,
            stored=history.gradients(ctx.backend, r, participants),
            norms=history.norms(ctx.backend, r, participants),
            v=state.model - history.model(r - 1).to(torch.float64),
        )
        if float(torch.linalg.vector_norm(step.v)) <= params.min_step:
            # M̂_t = M_{r−1}: the stored uploads are the exact gradients at M̂_t; no client is asked
            kind, gradients = "stored", step.stored
        elif not state.warmup_over:
            kind = "warmup"
            gradients = self._warmup(ctx, params, state, step)
        else:
            kind = "check" if t % interval == 0 else "estimate"
            gradients = self._estimate(ctx, params, state, step, check=t % interval == 0)
        with ctx.backend.step("UE"):
            weights = fedavg_weights(info, participants)
            g_agg = reveal_aggregate(ctx.backend, gradients, [weights[c] for c in participants])
        eta = params.unlearning_rate(info.lr)
        state.model = state.model - eta * g_agg
        state.log.rounds.append(RoundEntry(t, r, len(participants), kind, eta))

    def _warmup(self, ctx: UnlearnContext, params: StarfishParams, state: StarfishState, step: _Replay) -> Secret:
        """Exact round: every participant computes its gradient at M̂_t (pairs fill the buffers).

        Warm-up ends after B such rounds (a degenerate step s = M̂_t − M_{r−1} = 0 is no
        warm-up round: it uses the stored uploads and gives no pair).
        """
        backend = ctx.backend
        ctx.progress("warmup", step.t, len(state.ranked), f"round {step.r}")
        with backend.step("warmup"):
            answers = self._ask(ctx, state, step.t, step.r, step.participants, "warmup")
        with backend.step("UE"):
            if len(answers) < len(step.participants):  # a silent client keeps its estimate
                gradients = estimate_gradients(
                    backend, state, step.participants, step.stored, step.v, params, step.norms
                )
            else:
                gradients = step.stored
            gradients = self._apply_answers(backend, state, params, step, gradients, answers)
        state.warmup_pairs += 1
        state.warmup_over = state.warmup_pairs >= params.buffer_size
        return gradients

    def _estimate(
        self, ctx: UnlearnContext, params: StarfishParams, state: StarfishState, step: _Replay, check: bool
    ) -> Secret:
        """SecUE for every participant; on a check round SecTC and the flagged clients' correction."""
        backend = ctx.backend
        total = len(state.ranked)
        ctx.progress("estimate", step.t, total, f"round {step.r}")
        with backend.step("UE"):
            gradients = estimate_gradients(backend, state, step.participants, step.stored, step.v, params, step.norms)
        if not check:
            return gradients
        ctx.progress("threshold_check", step.t, total, f"{len(step.participants)} clients")
        with backend.step("TC"):
            sample = check_sample(state.model.numel(), params.check_sample, step.t)
            flags = flags_for(backend, state, step.participants, gradients, sample)
        state.log.flags.append(FlagEntry(step.t, step.r, dict(zip(step.participants, flags, strict=True))))
        flagged = [c for c, f in zip(step.participants, flags, strict=True) if f]
        if not flagged:
            return gradients
        ctx.progress("correction", step.t, total, f"{len(flagged)} flagged")
        with backend.step("correction"):
            answers = self._ask(ctx, state, step.t, step.r, flagged, "correction")
        with backend.step("UE"):
            return self._apply_answers(backend, state, params, step, gradients, answers)

    # ------------------------------------------------------------------ helpers
    def _ask(
        self, ctx: UnlearnContext, state: StarfishState, t: int, r: int, clients: Sequence[str], reason: str
    ) -> dict[str, Secret]:
        """Ask `clients` for exact gradients at M̂_t; returns only the answers received."""
        request = GradientRequest(
            model=state.model.to(torch.float32),
            unlearning_round=t,
            original_round=r,
            clients=tuple(clients),
            reason=reason,
        )
        replies: Mapping[str, Secret | None] = ctx.oracle.exact_gradients(ctx.backend, request)
        m = state.model.numel()
        answers: dict[str, Secret] = {}
        for client in clients:
            reply = replies.get(client)
            if reply is None:
                continue
            if tuple(reply.shape) != (m,):
                raise UnlearningError(
                    f"client {client!r} answered the {reason} of round {t} with shape {tuple(reply.shape)}, "
                    f"expected ({m},)"
                )
            answers[client] = reply
        state.log.record_ask(t, r, reason, clients, list(answers))
        return answers

    def _apply_answers(
        self,
        backend: Backend,
        state: StarfishState,
        params: StarfishParams,
        step: _Replay,
        gradients: Secret,
        answers: Mapping[str, Secret],
    ) -> Secret:
        """Exact answers replace estimates and become L-BFGS pairs (s = v, y = exact − stored)."""
        if not answers:
            return gradients
        answered = [c for c in step.participants if c in answers]
        rows = [step.participants.index(c) for c in answered]
        exact = backend.stack([answers[c] for c in answered], dim=0)
        stored_rows = backend.cat([backend.index(step.stored, slice(i, i + 1)) for i in rows], dim=0)
        add_pairs(backend, state, answered, step.t, step.v, exact, stored_rows, params)
        return replace_rows(backend, gradients, step.participants, answers)

    def _check_resume(self, ctx: UnlearnContext, params: StarfishParams, state: object) -> None:
        if not isinstance(state, StarfishState):
            raise UnlearningError(f"cannot resume Starfish from a {type(state).__name__}")
        if tuple(ctx.remaining_clients()) != state.clients:
            raise UnlearningError("the checkpoint was taken for a different set of remaining clients")
        last = len(state.ranked) + params.recovery_rounds
        if not 0 <= state.round <= last:
            raise UnlearningError(f"checkpoint round {state.round} outside 0..{last}")
        if state.model.numel() != ctx.history.model(0).numel():
            raise UnlearningError("the checkpoint's model does not match the history's model size")
        if state.log.request != _request(ctx, params):
            raise UnlearningError(
                "the checkpoint was taken for other targets or parameters; resume with the same request"
            )


def _request(ctx: UnlearnContext, params: StarfishParams) -> dict[str, Any]:
    """What a run was asked (recorded in its log; a resume must ask the same)."""
    return {"targets": list(ctx.targets), "params": params.as_dict}
