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

What we implement. All three steps over the stored history, written once on the `Backend`
interface (plaintext and 2PC alike) (our service stores every
round, so selective storage is applied when the request arrives, which selects the same
rounds and clients). p(M) and F(M) come from the `ModelProbe` (unlearning/probes.py) when
the context has one; without one (a job) rounds are scored from the public models alone
(`round_scores`, "step"). The rollback weighs every participant of a kept round by default
(`rollback_clients`; the paper's kept-only reading never rolls back for a target selective
storage dropped, docs/BASELINES.md). Recovery updates are revealed under the release rule
(`starfish.release_gate`, k = `min_cohort`), and the run is resumable after every recovery round
(`CrabState`).
Aggregates G_i are the public model differences (M_{i−1} − M_i)/η_i. Fresh updates
come from the GradientOracle (data order of the replayed round); the calibrated step
is M̃ ← M̃ − η_{t_j} Σ_c w_c ‖g^c‖/‖ĝ^c‖ ĝ^c with w over the kept benign clients.

Interpretations (docs/BASELINES.md): D is eq. (1)'s explicit sum (its KL[·||·] notation
names the arguments the other way round), averaged over probe samples; window sizes are
rounded up, P_b = ⌈λB_b⌉ (at least one round per window), X = ⌈δC⌉; rounds still open
when training ended form a last window; Ḡ_{t_0} = 0; eq. (5) sums norms, Φ(j) =
β Σ_{j'≤j} ‖I(C^−_{t_{j'}})‖, and both eq. (4) and eq. (5) are cumulative up to j; each set
in eq. (3) is normalised by its own data size; no j satisfying eq. (6) means rollback
to M_0; recovery replays the kept rounds after t_{j*}.

Under 2PC. Round selection uses only public data (the global models' outputs on the
public probe set, or the models themselves). Client selection: cos(g^c, G) ranks like ⟨g^c, G⟩/‖g^c‖ (‖G‖ is public),
with ⟨g^c, G⟩ local and ‖g^c‖ the client's reported norm; SecSrt (SecGE2 keys) sorts them,
and SecGE2 against the secret X-th key reveals one bit per client: kept or not. Rollback:
eq. (4)'s term is ‖Ḡ_C − Ḡ_{C^−}‖ (Ḡ_{t_{j−1}} cancels), zero in public when no target is
kept; norms are `Backend.sqrt` of squared norms taken on the vector divided by the public
‖G_{t_j}‖ (keeps them in the root's range); the bits [S(j) ≤ Φ(j)] stay secret and only
j* = Σ_j j·b_j·Π_{j'>j}(1 − b_{j'}) is revealed. Recovery: the ratio ‖g^c‖/‖ĝ^c‖ is a
secret division (reported norm over the root of the fresh squared norm) and only the
calibrated FedAvg update (or a merged sum) is revealed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import torch

from mpc.backend import Backend, Secret
from unlearning.baselines.common import loss_windows, stored_round_update, top_fraction
from unlearning.baselines.crab_state import CrabState, build_report
from unlearning.fedavg import capped_fedavg_weights, fedavg_weights
from unlearning.lbfgs import squared_norms
from unlearning.probes import ModelProbe, require_probe
from unlearning.starfish.anchor_noise import NoiseDraw, new_noise_key, secret_gaussian
from unlearning.starfish.correction import ask_exact
from unlearning.starfish.release import classify
from unlearning.starfish.release_gate import Gate, Step, drop_pending, release, sum_update
from unlearning.starfish.run_log import RoundEntry, StarfishLog
from unlearning.strategy import Strategy, UnlearnContext, UnlearnResult, check_resume, run_request
from unlearning.strategy_params import StrategyParams, check_choice, check_range

NAME = "crab"
#: model-equality tolerance of the release rule (`starfish.release_gate`: is the public model a Stage I point?)
MIN_STEP = 1e-9


@dataclass(frozen=True)
class CrabParams(StrategyParams):
    """Paper defaults (§V-A): loss_reduction α = 0.1, round_ratio λ = 0.6,
    client_ratio δ = 0.7, sensitivity_ratio β = 0.3. rollback_clients: whose stored updates
    eqs. (3)–(5) weigh — "all" participants of a selected round (ours, the default: a target
    that selective storage dropped still moved the model) or only the "kept" ones (the
    paper's, which never rolls back for a target it did not keep). round_score: how
    selective storage scores rounds (`round_scores`: "kl", "step" or "auto"). min_cohort: k
    of the release rule (1 reveals every recovery round; the service raises it to its k)."""

    loss_reduction: float = 0.1
    round_ratio: float = 0.6
    client_ratio: float = 0.7
    sensitivity_ratio: float = 0.3
    rollback_clients: str = "all"
    round_score: str = "auto"
    min_cohort: int = 1
    #: reveals near a Stage I model carry Starfish's anchored noise (starfish/release_gate.py; off: such a
    #: reveal is differenceable, tests that compare a job with a plaintext run turn it off)
    anchor_noise: bool = True

    def check(self) -> None:
        check_range(NAME, "loss_reduction", self.loss_reduction, 0.0, 1.0, low_open=True, high_open=True)
        check_range(NAME, "round_ratio", self.round_ratio, 0.0, 1.0, low_open=True)
        check_range(NAME, "client_ratio", self.client_ratio, 0.0, 1.0, low_open=True)
        check_range(NAME, "sensitivity_ratio", self.sensitivity_ratio, 0.0, 1e6)
        check_choice(NAME, "rollback_clients", self.rollback_clients, ("all", "kept"))
        check_choice(NAME, "round_score", self.round_score, ("auto", "kl", "step"))
        check_range(NAME, "min_cohort", self.min_cohort, 1, 1_000_000)


@dataclass(frozen=True)
class KeptRound:
    """A selected round t_j as the rollback weighs it: its clients (public; every participant,
    or the kept ones, `CrabParams.rollback_clients`), their stored gradients (x, m) and
    reported norms (x,) (secret), and the public ‖G_{t_j}‖."""

    round: int
    clients: list[str]
    grads: Secret
    norms: Secret
    scale: float


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


def kept_count(n: int, ratio: float) -> int:
    """X = ⌈δC⌉ of C clients (at least one)."""
    return min(n, max(1, math.ceil(ratio * n - 1e-9)))


def select_clients(
    backend: Backend, clients: Sequence[str], grads: Secret, norms: Secret, aggregate: torch.Tensor, ratio: float
) -> list[str]:
    """The ⌈δC⌉ clients with the highest contribution score cos(g^c, G) (eq. (2)), i.e. the
    largest ⟨g^c, G⟩/‖g^c‖: SecSrt by SecGE2 finds the secret X-th key, and one SecGE2 per
    client against it reveals only whether the client is kept (a client tied with the
    X-th score is kept too)."""
    n = len(clients)
    count = kept_count(n, ratio)
    if count == n:
        return list(clients)
    u = backend.matmul(grads, aggregate.to(torch.float64))  # ⟨g^c, G⟩, local
    keys = backend.stack([u, norms], dim=1)
    ordered, _ = backend.sort_desc(keys, u, method="ge2")
    kth = backend.index(ordered, [count - 1] * n)  # the X-th key repeated (n, 2)
    col = lambda x, k: backend.index(x, (slice(None), k))  # noqa: E731
    kept = backend.reveal(backend.ge2(u, norms, col(kth, 0), col(kth, 1))) > 0.5
    return [c for c, k in zip(clients, kept.tolist(), strict=True) if k]


def secret_norm(backend: Backend, x: Secret, scale: float) -> Secret:
    """‖x‖ of a secret (m,), shape (1,): √(‖x/s‖²)·s with the public scale s > 0."""
    scaled = backend.reshape(backend.mul(x, 1.0 / scale), (1, x.shape[0]))
    return backend.mul(backend.sqrt(squared_norms(backend, scaled)), scale)


def weighted_mean(backend: Backend, kept: KeptRound, members: Sequence[str], counts: Mapping[str, int]) -> Secret:
    """Σ_c |D_c|/|D_C| g^c over `members` ⊆ kept clients (m,)."""
    total = sum(counts[c] for c in members)
    w = torch.tensor([counts[c] / total if c in members else 0.0 for c in kept.clients], dtype=torch.float64)
    return backend.matmul(w, kept.grads)


def rollback_index(
    backend: Backend, kept: Iterable[KeptRound], n_samples: Sequence[Mapping[str, int]], targets: set[str], beta: float
) -> int:
    """j* of eq. (6) with S (eq. (4)) and Φ (eq. (5)) for kept rounds j = 1..T′, revealing
    only j* (0 when no j satisfies S(j) ≤ Φ(j)). `kept` may be a generator (one round in memory)."""
    previous: Secret | None = None
    s_total: Secret | None = None
    phi_total: Secret | None = None
    bits: list[Secret] = []
    for kr, counts in zip(kept, n_samples, strict=True):
        benign = [c for c in kr.clients if c not in targets]
        mean_all = weighted_mean(backend, kr, kr.clients, counts)
        mean_benign = weighted_mean(backend, kr, benign, counts) if benign else backend.mul(mean_all, 0.0)
        influence = mean_benign if previous is None else backend.sub(mean_benign, previous)  # eq. (3), C^−
        phi = secret_norm(backend, influence, kr.scale)
        phi_total = phi if phi_total is None else backend.add(phi_total, phi)
        if len(benign) < len(kr.clients):  # eq. (4): ‖I(C) − I(C^−)‖ = ‖Ḡ_C − Ḡ_{C^−}‖
            gap = secret_norm(backend, backend.sub(mean_all, mean_benign), kr.scale)
            s_total = gap if s_total is None else backend.add(s_total, gap)
        within = backend.ge(backend.mul(phi_total, beta), s_total if s_total is not None else 0.0)
        bits.append(within)
        previous = mean_all
    return _last_true(backend, bits)


def _last_true(backend: Backend, bits: Sequence[Secret]) -> int:
    """Reveal only j* = Σ_j j·b_j·Π_{j'>j}(1 − b_{j'}) (0 when every bit is 0)."""
    if not bits:
        return 0
    after: Secret | None = None  # Π over later j' of (1 − b_j')
    total: Secret | None = None
    for j in range(len(bits), 0, -1):
        term = bits[j - 1] if after is None else backend.mul(bits[j - 1], after)
        total = backend.mul(term, float(j)) if total is None else backend.add(total, backend.mul(term, float(j)))
        flip = backend.neg(backend.sub(bits[j - 1], 1.0))
        after = flip if after is None else backend.mul(after, flip)
    return int(round(float(backend.reveal(total).reshape(-1)[0])))


def _stored_fraction(ctx: UnlearnContext, kept: Sequence[Sequence[str]]) -> float:
    """Share of all stored client uploads that selective storage keeps (memory saving)."""
    uploads = sum(len(ctx.history.round_info(i).clients) for i in range(1, ctx.history.num_rounds + 1))
    return math.fsum(len(k) for k in kept) / max(1, uploads)


def gradient_norm_proxy(ctx: UnlearnContext) -> list[float]:
    """f_i = ‖G_{i+1}‖ for i = 0..T−1 and f_T = ‖G_T‖: the public aggregate's norm, the
    gradient norm ‖∇F(M_i)‖ where the history observed it (the data-free stand-in for F(M_i))."""
    total = ctx.history.num_rounds
    norms = [float(stored_round_update(ctx, i).norm()) for i in range(1, total + 1)]
    return norms + norms[-1:]


def round_scores(ctx: UnlearnContext, params: CrabParams) -> tuple[str, list[list[int]], dict[int, float]]:
    """(score kind, loss windows, per-round scores) for selective storage.

    "kl" (the paper's; needs the probe): windows by the probe loss F(M_i), scores the output
    divergence D(M_{i−1}, M_i) of eq. (1). "step" (data-free, public models only): windows by
    the aggregate's norm (`gradient_norm_proxy`), scores ‖M_i − M_{i−1}‖² — eq. (1)'s KL is
    ½·ΔMᵀF(M)ΔM + O(‖ΔM‖³) with F the Fisher information, here taken as the identity.
    "auto" is "kl" with a probe and "step" without one (a job has no probe)."""
    kind = params.round_score if params.round_score != "auto" else ("kl" if ctx.probe is not None else "step")
    models = [ctx.history.model(i) for i in range(ctx.history.num_rounds + 1)]
    if kind == "kl":
        probe = require_probe(ctx.probe, NAME)
        windows = loss_windows([probe.loss(m) for m in models], params.loss_reduction)
        return kind, _with_members(ctx, windows), round_divergences(probe, models)
    steps = {i: float((models[i].double() - models[i - 1].double()).norm()) ** 2 for i in range(1, len(models))}
    return kind, _with_members(ctx, loss_windows(gradient_norm_proxy(ctx), params.loss_reduction)), steps


def _with_members(ctx: UnlearnContext, windows: list[list[int]]) -> list[list[int]]:
    """The windows without the stored rounds that have no member (a model an earlier unlearning
    job installed): nothing of theirs can be kept or replayed."""
    kept = [[i for i in w if ctx.history.round_info(i).clients] for w in windows]
    return [w for w in kept if w]


class CrabStrategy(Strategy[CrabParams]):
    """Selective storage, adaptive rollback and calibrated recovery (module docstring);
    resumable after every recovery round (`CrabState`)."""

    name = NAME
    params_type = CrabParams
    state_type = CrabState

    def validate(self, ctx: UnlearnContext, params: CrabParams) -> None:
        super().validate(ctx, params)
        if params.round_score == "kl":
            require_probe(ctx.probe, NAME)
        if ctx.resume_from is not None:
            check_resume(ctx, params, ctx.resume_from, CrabState, lambda state: len(state.replay), "Crab")

    def __init__(self, noise: NoiseDraw | None = None) -> None:
        """`noise`: the anchored reveal's draw (starfish/release_gate.py); tests comparing backends fix it."""
        self.noise = noise if noise is not None else secret_gaussian

    def unlearn(self, ctx: UnlearnContext, params: CrabParams) -> UnlearnResult:
        """The three steps (or the rest of the recovery after a checkpoint); the report's costs cover this call only."""
        start = time.perf_counter()
        with ctx.backend.own_ledger() as run_ledger:
            state = _Run(ctx, params, self.noise).execute()
        report = build_report(ctx.backend.name, params.as_dict, state, ctx.history.num_rounds, params.min_cohort)
        report["costs"] = run_ledger.to_dict()
        steps = {name.removeprefix(f"{NAME}."): cost["seconds"] for name, cost in report["costs"].items()}
        report["timings"] = {"total_seconds": time.perf_counter() - start, "steps": steps}
        return UnlearnResult(model=state.model.to(torch.float32), report=report)


class _Run:
    """One Crab run (or the rest of its recovery): selection and rollback, then recovery rounds."""

    def __init__(self, ctx: UnlearnContext, params: CrabParams, noise: NoiseDraw) -> None:
        self.ctx, self.params, self.backend = ctx, params, ctx.backend
        self.gate = Gate(
            ctx.backend,
            ctx.history,
            params.min_cohort,
            MIN_STEP,
            ctx.privacy,
            label=NAME,
            cost_step=f"{NAME}.aggregate",
            anchor_noise=params.anchor_noise,
            noise=noise,
        )

    def execute(self) -> CrabState:
        """Recovery rounds state.round + 1..R, checkpointing after each; an update still held
        after the last one is dropped (never revealed nor applied)."""
        ctx = self.ctx
        if isinstance(ctx.resume_from, CrabState):
            state = ctx.resume_from.snapshot()
            state.log.resumed_at.append(state.round)
        else:
            state = self._start()
        last = len(state.replay)
        for r in range(state.round + 1, last + 1):
            self._recovery_round(state, r)
            if r == last:
                drop_pending(state, r)
            state.round = r
            if ctx.on_checkpoint is not None:
                ctx.on_checkpoint(state.snapshot())
        ctx.progress("done", last, last)
        return state

    def _start(self) -> CrabState:
        """Selective storage (Algorithm 1) and the adaptive rollback (Algorithm 2 lines 20–22)."""
        ctx, params, backend, history = self.ctx, self.params, self.backend, self.ctx.history
        ctx.progress("round_selection", 0, history.num_rounds)
        with backend.step(f"{NAME}.selective_storage"):
            score, windows, divergences = round_scores(ctx, params)
            rounds = select_rounds(windows, divergences, params.round_ratio)
        kept: list[list[str]] = []  # kept clients of each selected round
        with backend.step(f"{NAME}.rollback"):
            counts = [history.round_info(i).n_samples for i in rounds]
            j_star = rollback_index(
                backend, self._kept_rounds(rounds, kept), counts, set(ctx.targets), params.sensitivity_ratio
            )
        sizes = [len(history.round_info(i).clients) for i in rounds]
        return CrabState(
            clients=tuple(ctx.remaining_clients()),
            score=score,
            windows=windows,
            divergences=divergences,
            selected=rounds,
            kept=kept,
            j_star=j_star,
            model=history.model(rounds[j_star - 1] if j_star > 0 else 0).to(torch.float64).clone(),
            stored_fraction=_stored_fraction(ctx, kept),
            kept_bits=sum(n for n, k in zip(sizes, kept, strict=True) if len(k) < n),
            log=StarfishLog(request=run_request(ctx, params)),
            noise_key=new_noise_key(backend),
        )

    def _kept_rounds(self, rounds: list[int], kept: list[list[str]]) -> Iterator[KeptRound]:
        """Client selection per selected round (eq. (2)), appending the kept clients to `kept`;
        yields what the rollback weighs (`CrabParams.rollback_clients`), one round in memory."""
        backend, history = self.backend, self.ctx.history
        for i in rounds:
            clients = list(history.round_info(i).clients)
            grads, norms = history.gradients(backend, i, clients), history.norms(backend, i, clients)
            aggregate = stored_round_update(self.ctx, i)
            chosen = select_clients(backend, clients, grads, norms, aggregate, self.params.client_ratio)
            kept.append(chosen)
            scale = max(float(aggregate.norm()), 1e-6)
            if self.params.rollback_clients == "all":
                yield KeptRound(i, clients, grads, norms, scale)
                continue
            rows = torch.tensor([clients.index(c) for c in chosen], dtype=torch.long)
            yield KeptRound(i, chosen, backend.index(grads, rows), backend.index(norms, rows), scale)

    def _recovery_round(self, state: CrabState, r: int) -> None:
        """Recovery round r (Algorithm 2 lines 24–32): the kept benign clients of the r-th replayed
        kept round t compute at M̃_r; their calibrated FedAvg update goes through the release rule."""
        j = state.replay[r - 1]
        t = state.selected[j - 1]
        info = self.ctx.history.round_info(t)
        benign = [c for c in state.kept[j - 1] if c in set(state.clients)]
        self.ctx.progress("recovery", r, len(state.replay), f"round {t}")
        with self.backend.step(f"{NAME}.fresh_gradients"):
            answers = ask_exact(self.backend, self.ctx.oracle, state, (r, t), benign, "recovery") if benign else {}
        clients = [c for c in benign if c in answers]
        if not clients:
            state.log.rounds.append(RoundEntry(r, t, 0, "skipped"))
            return
        with self.backend.step(f"{NAME}.calibration"):
            rows = calibrated_rows(self.ctx, t, [answers[c] for c in clients], clients)
        weights = capped_fedavg_weights(info, clients, self.params.min_cohort) or fedavg_weights(info, clients)
        coefficients = {c: info.lr * weights[c] for c in clients}
        update, sensitivity = sum_update(self.gate, rows, list(coefficients.values()))
        state.log.rounds.append(RoundEntry(r, t, len(clients), "recovery", info.lr))
        contributions = classify(clients, weights, info.lr, clients, ())
        release(self.gate, state, Step(r, t, clients, update, sensitivity, coefficients), contributions)


def calibrated_rows(ctx: UnlearnContext, t: int, fresh: Sequence[Secret], clients: Sequence[str]) -> Secret:
    """[‖g^c‖/‖ĝ^c‖·ĝ^c] per client (eq. (8)): stored reported norms over the fresh norms, both
    secret; the public ‖G_t‖ scales the roots into range. Shape (n, m)."""
    backend = ctx.backend
    grads = backend.stack(list(fresh), dim=0)
    stored = ctx.history.norms(backend, t, list(clients))
    scale = max(float(stored_round_update(ctx, t).norm()), 1e-6)
    fresh_norms = backend.reshape(
        backend.sqrt(squared_norms(backend, backend.mul(grads, 1.0 / scale))), (len(clients),)
    )
    ratio = backend.div(backend.mul(stored, 1.0 / scale), fresh_norms)
    return backend.mul(grads, backend.reshape(ratio, (len(clients), 1)))
