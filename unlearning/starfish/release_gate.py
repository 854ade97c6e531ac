"""The Stage II release step (docs/PRIVACY.md, "Stage II release rule"): one update U_t
through the rule of `unlearning.starfish.release`, for Starfish and the baselines that run as
jobs (FedRecover, Crab).

Each step moves the public model by one update U_t = Σ_j c_j·ĝ^j (public coefficients
c_j = η·w_j: Algorithm 4 line 20's η_u·Ĝ_t, or one FedAvg update of a baseline's replayed
round), formed in shares (`sum_update`) and handed here with the public description of its
contributions (`release.classify`: exact vectors at the current model point, stored
gradients at M_{r−1}, opaque rows). Then:

1. a step whose participants count fewer than k principals is excluded (never revealed,
   merged nor applied): merged into the next update it would hide only behind that
   aggregate, which is small near convergence;
2. otherwise U_t joins the pending update; exact vectors count at the stored round i whose
   M_{i−1} the public model equals (`release.anchor_round`) when i = r — or at any such i
   with full-batch clients (`Gate.full_batch`: a client's exact vector at a point is the
   same whichever round's data order it used) — else they are opaque;
3. the pending sum is revealed — plainly, or with distributed DP noise for its summed
   sensitivity — and the model moves, iff its support (`release.revealable`) is ≥ k;
   otherwise it stays secret and the next step's update is added to it.

A run ends with `drop_pending`: an update still held then is never revealed nor applied.

Anchored noise (`unlearning.starfish.anchor_noise`, docs/PRIVACY.md "Anchored reveals"): a
step taken within `Gate.anchor_reach` Stage I steps of some M_{i−1} (with k > 1) notes the
clients of S_i it lacks (`note_anchor`), and the reveal of a pending sum with anchors adds
[z] = κ·s·u/√m, u drawn under HMAC(this party's noise key, t) of the reveal's last step t.
Every run's first replay sits at M_0 (Crab's may sit at its rollback point M_{t_j*}), where
the held-and-merged first replay differences otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch

from mpc.backend import Backend, Secret
from unlearning.fedavg import AggregatePrivacy, reveal_update, weighted_sum
from unlearning.history import SharedHistory
from unlearning.starfish.anchor_noise import (
    ANCHOR_REACH,
    NoiseDraw,
    anchored_rounds,
    new_noise_key,
    noised,
    note_anchor,
    reveal_key,
    secret_gaussian,
)
from unlearning.starfish.release import PendingRelease, anchor_round, revealable
from unlearning.starfish.run_log import ReleaseEntry, StarfishLog
from unlearning.weight_cap import principal_count

#: (exact at the model point, stored at M_{r−1}, opaque clients) of one step (`release.classify`)
Contributions = tuple[dict[str, float], dict[str, float], set[str]]


class ReleasingState(Protocol):
    """What the gate reads and writes of a run's state."""

    model: torch.Tensor  #: the public model (float64)
    pending: PendingRelease
    held: Secret | None
    log: StarfishLog
    noise_key: Secret | None  #: this party's key of the anchored noise (drawn when the run starts)


@dataclass(frozen=True)
class Gate:
    """The rule's inputs for one run: k, the model-equality tolerance, DP; `label` names a
    reveal's DP release ("<label> steps t,…") and `cost_step` the cost-ledger step of the sum
    and its reveal; whether reveals near a Stage I model carry the anchored noise, its draw
    (tests that compare two backends pass one fixed draw) and reach; whether clients compute
    full-batch gradients (step 2 of the module docstring)."""

    backend: Backend
    history: SharedHistory
    min_cohort: int
    min_step: float
    privacy: AggregatePrivacy | None
    label: str
    cost_step: str
    anchor_noise: bool = True
    noise: NoiseDraw = secret_gaussian
    anchor_reach: float = ANCHOR_REACH
    full_batch: bool = False


@dataclass(frozen=True)
class Step:
    """Step t replaying stored round r with `members`; its update [U_t] and its DP sensitivity;
    `kept`: members whose answer became a pair only, their estimate being published (logged)."""

    t: int
    r: int
    members: Sequence[str]
    update: Secret
    sensitivity: float = 0.0
    coefficients: Mapping[str, float] = field(default_factory=dict)  #: the public η·w_j of its members
    kept: frozenset[str] = frozenset()


def release(gate: Gate, state: ReleasingState, step: Step, contributions: Contributions) -> None:
    """Steps 1–3 of the module docstring for one step; the decision is logged in `state.log.releases`."""
    cohort = principal_count(dict.fromkeys(step.members, 1), gate.history.round_info(step.r).principals)
    if cohort < gate.min_cohort:
        state.log.releases.append(ReleaseEntry(step.t, "excluded", [step.t], cohort))
        return
    exact, stored, opaque = contributions
    pending = state.pending
    at = anchor_round(gate.history, state.model, gate.min_step) if exact else None
    if gate.anchor_noise and gate.min_cohort > 1:  # k = 1 is Algorithm 4 without the rule: no anchors
        note_anchor(gate.history, pending, state.model, step.coefficients, gate.anchor_reach, gate.min_step)
    if at is not None and (at == step.r or gate.full_batch):
        pending.add_exact(at, exact)  # vectors at M_{at−1}, where Stage I published G_at
    else:  # at a point Stage I never aggregated with round r's data order: opaque
        opaque = opaque | set(exact)
    if stored:
        pending.add_exact(step.r, stored)  # g_r^j lies at M_{r−1}, where Stage I published G_r
    pending.opaque |= opaque
    pending.steps.append(step.t)
    pending.sensitivity += step.sensitivity
    state.held = step.update if state.held is None else gate.backend.add(state.held, step.update)
    ok, support = revealable(pending, gate.history, gate.min_cohort)
    kept = sorted(step.kept)
    if not ok:
        state.log.releases.append(ReleaseEntry(step.t, "held", list(pending.steps), support, kept))
        return
    with gate.backend.step(gate.cost_step):
        state.model = state.model - _open(gate, state, pending, state.held)
    anchored = anchored_rounds(pending)
    state.log.releases.append(ReleaseEntry(step.t, "revealed", list(pending.steps), support, kept, anchored))
    state.pending, state.held = PendingRelease(), None


def _open(gate: Gate, state: ReleasingState, pending: PendingRelease, held: Secret) -> torch.Tensor:
    """Reveal the held sum plus its anchored noise (module docstring), drawn under the key of
    this reveal (its last step): as is, or with distributed noise for its summed sensitivity.
    A state without a noise key (a checkpoint taken before keys existed) draws it here."""
    if pending.anchors:
        if state.noise_key is None:
            state.noise_key = new_noise_key(gate.backend)
        key = reveal_key(gate.backend, state.noise_key, pending.steps[-1])
        held = noised(gate.backend, gate.history, pending, held, key, gate.noise)
    if gate.privacy is None:
        return reveal_update(gate.backend, held)
    label = f"{gate.label} steps " + ",".join(str(t) for t in pending.steps)
    return gate.privacy.reveal_sum(gate.backend, held, pending.sensitivity, sorted(pending.clients()), label)


def drop_pending(state: ReleasingState, t: int) -> None:
    """End of the run: an update still held is dropped (never revealed nor applied)."""
    if not state.pending.empty:
        state.log.releases.append(ReleaseEntry(t, "dropped", list(state.pending.steps), 0))
        state.pending, state.held = PendingRelease(), None


def sum_update(gate: Gate, gradients: Secret, coefficients: Sequence[float]) -> tuple[Secret, float]:
    """[U] = Σ_j c_j·[ĝ^j] in shares and its DP sensitivity (0 without DP; with DP the rows are
    clipped inside 2PC and the noise is added when the (merged) sum is revealed)."""
    with gate.backend.step(gate.cost_step):
        if gate.privacy is None:
            return weighted_sum(gate.backend, gradients, coefficients), 0.0
        return gate.privacy.clipped_sum(gate.backend, gradients, coefficients)
