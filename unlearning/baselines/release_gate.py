"""The Stage II release rule (`unlearning.starfish.release`) for the baselines that run as jobs.

FedRecover and Crab move the public model by one FedAvg update per replayed round. Each
update U_t = Σ_j c_j·ĝ^j (public coefficients c_j = η·w_j) is formed in shares and handed
here with the public description of its contributions (`release.classify`: exact vectors
at the current model point, stored gradients at M_{r−1}, opaque rows). Then, as Starfish's
driver does (docs/PRIVACY.md, "Stage II release rule"):

1. a step whose participants count fewer than k principals is excluded (never revealed,
   merged nor applied);
2. otherwise U_t joins the pending update; exact vectors count at stored round r's point
   only when the public model equals M_{r−1} (`release.anchor_round`), else they are opaque;
3. the pending sum is revealed — plainly, or with distributed DP noise for its summed
   sensitivity — and the model moves, iff its support (`release.revealable`) is ≥ k;
   otherwise it stays secret and the next step's update is added to it.

A run ends with `drop_pending`: an update still held then is never revealed nor applied.

Starfish's anchored noise (`unlearning.starfish.anchor_noise`, docs/PRIVACY.md "Anchored
reveals") applies here as there: a step taken within `ANCHOR_REACH` Stage I steps of some
M_{i−1} (with k > 1) notes the clients of S_i it lacks (`note_anchor`), and the reveal of a
pending sum with anchors adds [z] = κ·s·u/√m, u drawn under HMAC(this party's noise key, t)
of the reveal's last step t. FedRecover's and Crab's first replays sit at M_0 (or at Crab's
rollback point M_{t_j*}), where the held-and-merged first replay differences otherwise.
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
    noise_key: Secret | None  #: this party's key of the anchored noise (None until the first reveal)


@dataclass(frozen=True)
class Gate:
    """The rule's inputs for one run: k, the model-equality tolerance, DP, a label for releases;
    whether reveals near a Stage I model carry the anchored noise, and its draw (tests that
    compare two backends pass one fixed draw)."""

    backend: Backend
    history: SharedHistory
    min_cohort: int
    min_step: float
    privacy: AggregatePrivacy | None
    label: str
    anchor_noise: bool = True
    noise: NoiseDraw = secret_gaussian


@dataclass(frozen=True)
class Step:
    """Step t replaying stored round r with `members`; its update [U_t] and its DP sensitivity."""

    t: int
    r: int
    members: Sequence[str]
    update: Secret
    sensitivity: float = 0.0
    coefficients: Mapping[str, float] = field(default_factory=dict)  #: the public η·w_j of its members


def release(gate: Gate, state: ReleasingState, step: Step, contributions: Contributions) -> None:
    """Steps 1–3 of the module docstring for one step; the decision is logged in `state.log.releases`."""
    cohort = principal_count(dict.fromkeys(step.members, 1), gate.history.round_info(step.r).principals)
    if cohort < gate.min_cohort:
        state.log.releases.append(ReleaseEntry(step.t, "excluded", [step.t], cohort))
        return
    exact, stored, opaque = contributions
    pending = state.pending
    if gate.anchor_noise and gate.min_cohort > 1:
        note_anchor(gate.history, pending, state.model, step.coefficients, ANCHOR_REACH, gate.min_step)
    if exact and anchor_round(gate.history, state.model, gate.min_step) == step.r:
        pending.add_exact(step.r, exact)  # vectors at M_{r−1}, where Stage I published G_r
    else:  # at a point Stage I never aggregated with round r's data order: opaque
        opaque = opaque | set(exact)
    if stored:
        pending.add_exact(step.r, stored)
    pending.opaque |= opaque
    pending.steps.append(step.t)
    pending.sensitivity += step.sensitivity
    state.held = step.update if state.held is None else gate.backend.add(state.held, step.update)
    ok, support = revealable(pending, gate.history, gate.min_cohort)
    if not ok:
        state.log.releases.append(ReleaseEntry(step.t, "held", list(pending.steps), support))
        return
    with gate.backend.step(f"{gate.label}.aggregate"):
        state.model = state.model - _open(gate, state, pending, state.held)
    anchored = anchored_rounds(pending)
    state.log.releases.append(ReleaseEntry(step.t, "revealed", list(pending.steps), support, [], anchored))
    state.pending, state.held = PendingRelease(), None


def _open(gate: Gate, state: ReleasingState, pending: PendingRelease, held: Secret) -> torch.Tensor:
    """Reveal the held sum plus its anchored noise (module docstring): as is, or with distributed
    noise for its summed sensitivity. The party's noise key is drawn at the first reveal."""
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
    with gate.backend.step(f"{gate.label}.aggregate"):
        if gate.privacy is None:
            return weighted_sum(gate.backend, gradients, coefficients), 0.0
        return gate.privacy.clipped_sum(gate.backend, gradients, coefficients)
