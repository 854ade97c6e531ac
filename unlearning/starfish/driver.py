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
   * the update U_t = η_u·FedAvg(ĝ) is formed in shares (an estimate round without SecTC or
     DP, where nothing reads a client's row, forms only U_t: `secue.estimate_update`); the
     release rule (release.py) reveals
     it — together with any held updates — only when no combination with public Stage I
     aggregates involves fewer than k = `min_cohort` clients, then M̂ ← M̂ − U; otherwise U_t
     is held secret and M̂ stays (Algorithm 4 line 20 reveals every Ĝ_t; see docs/PRIVACY.md).
4. Optional recovery rounds t = T′+1..T′+R: exact FedAvg rounds with the remaining
   clients (recovery.py), each revealed only under the release rule's cohort condition.
   After each round the state is checkpointed through `ctx.on_checkpoint`; the report is
   built from the run's typed log (run_log.py, run_report.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial

import torch

from mpc.backend import Backend, Secret
from unlearning.fedavg import capped_fedavg_weights, fedavg_weights
from unlearning.starfish.anchor_noise import NoiseDraw, new_noise_key, secret_gaussian
from unlearning.starfish.correction import ask_exact, check_sample, client_thresholds, flags_for, replace_rows
from unlearning.starfish.params import StarfishParams
from unlearning.starfish.recovery import recovery_round, recovery_schedule
from unlearning.starfish.release import anchor_round, classify
from unlearning.starfish.release_gate import Gate, Step, drop_pending, release, sum_update
from unlearning.starfish.run_log import FlagEntry, RoundEntry, StarfishLog
from unlearning.starfish.run_report import build_report
from unlearning.starfish.sample_first import kept_update, sample_first_flags
from unlearning.starfish.secrs import RoundSelector, SecRSSelector
from unlearning.starfish.secue import add_pairs, estimate_gradients, estimate_update, round_terms
from unlearning.starfish.state import StarfishState
from unlearning.starfish.thresholds import determine_thresholds
from unlearning.strategy import Strategy, UnlearnContext, UnlearningError, UnlearnResult, check_resume, run_request


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
    #: clients whose published row stays their estimate even when they answer (release rule)
    keep_estimates: frozenset[str] = frozenset()


class StarfishStrategy(Strategy[StarfishParams]):
    """Privacy-preserving federated unlearning by Starfish (runs on any `Backend`).

    `selector` picks the replayed rounds: SecRS by default; the random-selection baseline
    passes its own (`unlearning.baselines.random_selection`). `noise` draws the secret Gaussian
    of an anchored reveal (anchor_noise.py): `Backend.keyed_random` under the reveal's key by
    default; tests that compare two backends pass one fixed draw.
    """

    name = "starfish"
    params_type = StarfishParams
    state_type = StarfishState

    def __init__(self, selector: RoundSelector | None = None, noise: NoiseDraw | None = None) -> None:
        self.selector = selector if selector is not None else SecRSSelector()
        self.noise = noise if noise is not None else secret_gaussian

    def validate(self, ctx: UnlearnContext, params: StarfishParams) -> None:
        super().validate(ctx, params)
        if ctx.history.num_rounds < 1:
            raise UnlearningError("the history holds no stored round")
        if ctx.resume_from is not None:
            check_resume(ctx, params, ctx.resume_from, StarfishState, partial(_last_round, params), "Starfish")

    def unlearn(self, ctx: UnlearnContext, params: StarfishParams) -> UnlearnResult:
        """Run (or resume) Algorithm 4; the report's costs cover this call only.

        The call's costs are also added to `ctx.backend.ledger` (a long-lived backend keeps
        its cumulative totals).
        """
        with ctx.backend.own_ledger() as run_ledger:
            state = self._execute(ctx, params)
        total = ctx.history.num_rounds
        eta = params.unlearning_rate(ctx.history.round_info(state.selected[0]).lr)
        report = build_report(self.name, ctx.backend.name, params, state, total, eta)
        report["costs"] = run_ledger.to_dict()
        return UnlearnResult(model=state.model.to(torch.float32), report=report)

    def _execute(self, ctx: UnlearnContext, params: StarfishParams) -> StarfishState:
        total = ctx.history.num_rounds
        if isinstance(ctx.resume_from, StarfishState):
            state = ctx.resume_from.snapshot()
            state.log.resumed_at.append(state.round)
        else:
            state = self._start(ctx, params)
        selected = len(state.selected)
        last = selected + params.recovery_rounds
        interval = params.check_interval(total)
        recovery = recovery_schedule(state.selected, total, params.recovery_rounds)
        for t in range(state.round + 1, last + 1):
            if t <= selected:
                self._unlearning_round(ctx, params, state, t, interval)
            else:
                recovery_round(ctx, params, state, t, recovery[t - selected - 1], self._ask)
            if t == selected:  # an update still held is never revealable: dropped, not applied
                drop_pending(state, t)
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
            selected=selection.rounds,
            method=selection.method,
            deltas=deltas,
            model=history.model(0).to(torch.float64).clone(),
            log=StarfishLog(request=run_request(ctx, params)),
            noise_key=new_noise_key(backend),
        )

    def _unlearning_round(
        self, ctx: UnlearnContext, params: StarfishParams, state: StarfishState, t: int, interval: int
    ) -> None:
        """One iteration of Algorithm 4 lines 15–20, replaying the t-th selected round."""
        history = ctx.history
        r = state.selected[t - 1]
        info = history.round_info(r)
        participants = _participants(ctx, state, t)
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
            keep_estimates=_keep_estimates(ctx, params, state, participants),
        )
        eta = params.unlearning_rate(info.lr)
        # capped so no principal holds more than 1/k; None: fewer than k principals (the step is excluded)
        weights = capped_fedavg_weights(info, participants, params.min_cohort) or fedavg_weights(info, participants)
        gate = self._gate(ctx, params)
        coefficients = {c: eta * weights[c] for c in participants}
        without_pairs = {c for c in participants if not state.buffers.get(c)}  # their estimate is g_r^j
        update: Secret | None = None
        if float(torch.linalg.vector_norm(step.v)) <= params.min_step:
            # M̂_t = M_{r−1}: the stored uploads are the exact gradients at M̂_t; no client is asked
            kind, gradients, answered = "stored", step.stored, set(participants)
        elif not state.warmup_over:
            kind = "warmup"
            gradients, answered = self._warmup(ctx, params, state, step)
        elif t % interval != 0 and gate.privacy is None:  # nothing reads the rows (no SecTC, no clipping)
            kind, answered = "estimate", set()
            update = self._estimate_sum(ctx, params, state, step, list(coefficients.values()), interval)
        elif gate.privacy is None and (sample := check_sample(state.model.numel(), params.check_sample, t)) is not None:
            kind = "check"  # t % interval == 0; SecTC reads the rows only where it compares them
            update, answered = self._sampled_check(ctx, params, state, step, list(coefficients.values()), sample)
        else:
            kind = "check" if t % interval == 0 else "estimate"
            gradients, answered = self._estimate(ctx, params, state, step, check=t % interval == 0)
        sensitivity = 0.0
        if update is None:
            update, sensitivity = sum_update(gate, gradients, list(coefficients.values()))
        state.log.rounds.append(RoundEntry(t, r, len(participants), kind, eta))
        contributions = classify(participants, weights, eta, answered, without_pairs)
        released = Step(t, r, participants, update, sensitivity, coefficients, step.keep_estimates)
        release(gate, state, released, contributions)

    def _gate(self, ctx: UnlearnContext, params: StarfishParams) -> Gate:
        """The release step's inputs for this run (release_gate.py): Starfish's parameters, reveals
        labelled "stage2" and counted in the UE step."""
        return Gate(
            ctx.backend,
            ctx.history,
            params.min_cohort,
            params.min_step,
            ctx.privacy,
            label="stage2",
            cost_step="UE",
            anchor_noise=params.anchor_noise,
            noise=self.noise,
            anchor_reach=params.anchor_reach,
            full_batch=params.full_batch_gradients,
        )

    def _warmup(
        self, ctx: UnlearnContext, params: StarfishParams, state: StarfishState, step: _Replay
    ) -> tuple[Secret, set[str]]:
        """Exact round: every participant computes its gradient at M̂_t (pairs fill the buffers).

        Warm-up ends after B such rounds (a degenerate step s = M̂_t − M_{r−1} = 0 is no
        warm-up round: it uses the stored uploads and gives no pair). Returns the gradients
        and the clients whose row is an exact answer.
        """
        backend = ctx.backend
        ctx.progress("warmup", step.t, len(state.selected), f"round {step.r}")
        with backend.step("warmup"):
            answers = self._ask(ctx, state, step.t, step.r, step.participants, "warmup")
        with backend.step("UE"), backend.fixed_repeats(False):  # the answers add pairs: new products next
            if len(answers) < len(step.participants) or step.keep_estimates:  # a silent client keeps its estimate
                gradients = estimate_gradients(
                    backend, state, step.participants, step.stored, step.v, params, step.norms
                )
            else:
                gradients = step.stored
            gradients = self._apply_answers(backend, state, params, step, gradients, answers)
        state.warmup_pairs += 1
        state.warmup_over = state.warmup_pairs >= params.buffer_size
        return gradients, set(answers) - step.keep_estimates

    def _estimate_sum(
        self,
        ctx: UnlearnContext,
        params: StarfishParams,
        state: StarfishState,
        step: _Replay,
        coefficients: list[float],
        interval: int,
    ) -> Secret:
        """SecUE of an estimate round when nothing reads a client's row (no SecTC, no DP
        clipping): the update [U_t] = Σ_j c_j·[ĝ^j] itself (`secue.estimate_update`: its
        products have m elements, not n·m)."""
        backend = ctx.backend
        total = len(state.selected)
        ctx.progress("estimate", step.t, total, f"round {step.r}")
        # drawn ahead only for a next estimate round of the same clients (a check round's products are per client)
        again = (step.t + 1) % interval != 0 and _next_replays_same_clients(ctx, state, step)
        with backend.step("UE"), backend.fixed_repeats(again):
            return estimate_update(
                backend, state, step.participants, step.stored, step.v, params, coefficients, step.norms
            )

    def _estimate(
        self, ctx: UnlearnContext, params: StarfishParams, state: StarfishState, step: _Replay, check: bool
    ) -> tuple[Secret, set[str]]:
        """SecUE for every participant; on a check round SecTC and the flagged clients' correction.

        Returns the gradients and the clients whose row is an exact answer.
        """
        backend = ctx.backend
        total = len(state.selected)
        ctx.progress("estimate", step.t, total, f"round {step.r}")
        # the products of this estimate come again (randomness drawn ahead for them) only when the
        # next round replays the same clients on the same pairs: not after a check round, whose
        # corrections add pairs, nor after the last round
        again = not check and _next_replays_same_clients(ctx, state, step)
        with backend.step("UE"), backend.fixed_repeats(again):
            gradients = estimate_gradients(backend, state, step.participants, step.stored, step.v, params, step.norms)
        if not check:
            return gradients, set()
        ctx.progress("threshold_check", step.t, total, f"{len(step.participants)} clients")
        with backend.step("TC"):
            sample = check_sample(state.model.numel(), params.check_sample, step.t)
            flags = flags_for(backend, state, step.participants, gradients, sample)
        answers = self._correct(ctx, state, step, flags)
        if not answers:
            return gradients, set()
        with backend.step("UE"):
            gradients = self._apply_answers(backend, state, params, step, gradients, answers)
        return gradients, set(answers) - step.keep_estimates

    def _sampled_check(
        self,
        ctx: UnlearnContext,
        params: StarfishParams,
        state: StarfishState,
        step: _Replay,
        coefficients: list[float],
        sample: torch.Tensor,
    ) -> tuple[Secret, set[str]]:
        """A check round whose rows nothing else reads (no DP clipping), SecTC's sample first
        (`sample_first`): the estimates are formed only where compared, the update directly
        (no m-sized estimate of a client whose answer replaces it). Returns the update and
        the clients whose row is an exact answer."""
        backend = ctx.backend
        total = len(state.selected)
        ctx.progress("estimate", step.t, total, f"round {step.r}")
        with backend.step("UE"), backend.fixed_repeats(False):
            terms = round_terms(backend, state, step.participants, step.stored, step.v, params, step.norms)
        ctx.progress("threshold_check", step.t, total, f"{len(step.participants)} clients")
        deltas = client_thresholds(backend, state, step.participants)
        flags = sample_first_flags(backend, terms, step.stored, step.v, deltas, sample)
        answers = self._correct(ctx, state, step, flags)
        published = {c: a for c, a in answers.items() if c not in step.keep_estimates}
        with backend.step("UE"):
            update = kept_update(backend, terms, step.stored, step.v, step.participants, coefficients, published)
            self._add_pairs(backend, state, params, step, answers)
        return update, set(published)

    def _correct(
        self, ctx: UnlearnContext, state: StarfishState, step: _Replay, flags: Sequence[bool]
    ) -> dict[str, Secret]:
        """Log the round's SecTC flags and ask the flagged clients for exact gradients
        (Algorithm 4 lines 17–18); the answers received."""
        state.log.flags.append(FlagEntry(step.t, step.r, dict(zip(step.participants, flags, strict=True))))
        flagged = [c for c, f in zip(step.participants, flags, strict=True) if f]
        if not flagged:
            return {}
        ctx.progress("correction", step.t, len(state.selected), f"{len(flagged)} flagged")
        with ctx.backend.step("correction"):
            return self._ask(ctx, state, step.t, step.r, flagged, "correction")

    # ------------------------------------------------------------------ helpers
    def _ask(
        self, ctx: UnlearnContext, state: StarfishState, t: int, r: int, clients: Sequence[str], reason: str
    ) -> dict[str, Secret]:
        """Ask `clients` for exact gradients at M̂_t; returns only the answers received."""
        return ask_exact(ctx.backend, ctx.oracle, state, (t, r), clients, reason)

    def _apply_answers(
        self,
        backend: Backend,
        state: StarfishState,
        params: StarfishParams,
        step: _Replay,
        gradients: Secret,
        answers: Mapping[str, Secret],
    ) -> Secret:
        """Exact answers become L-BFGS pairs (`_add_pairs`) and replace the estimates (except
        for `step.keep_estimates`)."""
        if not answers:
            return gradients
        self._add_pairs(backend, state, params, step, answers)
        published = {c: a for c, a in answers.items() if c not in step.keep_estimates}
        return replace_rows(backend, gradients, step.participants, published) if published else gradients

    @staticmethod
    def _add_pairs(
        backend: Backend, state: StarfishState, params: StarfishParams, step: _Replay, answers: Mapping[str, Secret]
    ) -> None:
        """Exact answers become L-BFGS pairs (s = v, y = exact − stored). The last unlearning
        round offers no pair: no later round would use it."""
        if not answers or step.t >= len(state.selected):
            return
        answered = [c for c in step.participants if c in answers]
        rows = torch.tensor([step.participants.index(c) for c in answered], dtype=torch.long)
        exact = backend.stack([answers[c] for c in answered], dim=0)
        add_pairs(backend, state, answered, step.t, step.v, exact, backend.index(step.stored, rows), params)


def _participants(ctx: UnlearnContext, state: StarfishState, t: int) -> list[str]:
    """The remaining clients of the t-th selected round, in the round's order (Algorithm 4
    line 16: the replayed round's participants without the targets)."""
    members = set(state.clients)
    return [c for c in ctx.history.round_info(state.selected[t - 1]).clients if c in members]


def _next_replays_same_clients(ctx: UnlearnContext, state: StarfishState, step: _Replay) -> bool:
    """Whether a next unlearning round exists and replays the same remaining clients as `step`
    (the condition under which its fixed-operand products may come again)."""
    return step.t < len(state.selected) and _participants(ctx, state, step.t + 1) == step.participants


def _keep_estimates(
    ctx: UnlearnContext, params: StarfishParams, state: StarfishState, participants: Sequence[str]
) -> frozenset[str]:
    """Clients that publish their estimate instead of an exact answer in this step.

    While an update is held at a model point where Stage I published an aggregate (the first
    replay at M_0), further exact answers there would only repeat the differenceable sum;
    clients that have L-BFGS pairs publish their estimate (opaque to the release rule) and
    their answers still become pairs. Empty otherwise.
    """
    if state.pending.empty or anchor_round(ctx.history, state.model, params.min_step) is None:
        return frozenset()
    return frozenset(c for c in participants if state.buffers.get(c))


def _last_round(params: StarfishParams, state: StarfishState) -> int:
    """The last round a Starfish checkpoint can stand at: the selected rounds, then recovery."""
    return len(state.selected) + params.recovery_rounds
