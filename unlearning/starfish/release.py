"""The Stage II release rule: when an unlearning step's update may be revealed (docs/PRIVACY.md).

Algorithm 4 line 20 reveals Ĝ_t every round. Two public facts can make such a reveal isolate
one client: a small cohort (one remaining participant reveals its own gradient), and a
public Stage I aggregate at the same model point (unlearning round 1 replays stored round 1
at M̂_1 = M_0, and N·G_1 − N_rem·Ĝ_1 = n_D·g_1^D is the target's gradient). The rule below
closes both exactly; approximate coincidences (nearby models) are out of its scope.

Model of what a step publishes. Each step t adds U_t = η_t·Σ_j w_j ĝ_t^j (public weights
w_j = n_j/Σn, FedAvg). A client's contribution ĝ_t^j is one of

* an *exact* vector at a model point p: an answer computed at M̂_t (warm-up or correction),
  or an estimate whose step v = M̂_t − M_{r−1} is null (ĝ = g_r^j, the stored gradient at
  M̂_t), both at p = M̂_t; or an estimate of a client with no L-BFGS pair (H = 0, so
  ĝ = g_r^j) at p = M_{r−1}. Conservatively, a client's exact vector at p is the same
  vector whichever round is replayed (a full-batch client ignores the data order);
* *opaque*: an estimate g_r^j + H^j v with v ≠ 0 and at least one accepted pair — a new
  vector nobody else publishes.

Stage I published G_i = Σ_{j∈S_i} (n_j/N_i)·g_i^j at p = M_{i−1}. For a pending update R
(the held steps and the current one), an observer can form R − Σ_i b_i·G_i over the rounds
i whose model point R touches. Per point, b_i = 0 leaves R's clients there, and b_i chosen
to cancel one class of clients with the same ratio (R's coefficient)/(G_i's coefficient)
leaves the rest of both cohorts (S_i Δ R's clients, plus the other classes). Opaque
clients never cancel. The *support* of the release is the smallest number of clients in a
combination that does not cancel to zero (a combination that cancels everything shows only
that R repeats public values); R is revealed iff support ≥ k (`min_cohort`). b = 0 at every
point gives R's own cohort, so support ≥ k implies at least k remaining participants.

Otherwise R stays secret (shares), the public model does not move, and the next step's
update is added to it (its opaque clients mask the held part); a run that ends with a held
update drops it (it never becomes public). A step with fewer than k remaining participants
is excluded before all this (its update is discarded), and while an update is held at a
Stage I model point, clients with an accepted pair publish their estimate rather than their
answer (`strategy._keep_estimates`), else the held sum could never become revealable.
Earlier Stage II reveals share no vector with R:
each stored round is replayed once and the public model moves after every reveal.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from unlearning.history import SharedHistory
from unlearning.weight_cap import principal_of

#: combinations enumerated exactly up to this many; beyond it a lower bound is used (holds more)
EXACT_LIMIT = 4096
#: relative tolerance when grouping clients by coefficient ratio
RATIO_TOL = 1e-9


@dataclass
class PendingRelease:
    """The public description of the update not yet revealed (the secret sum is kept aside).

    blocks: stored round i (its model point M_{i−1}) → client → coefficient of the client's
    exact vector at that point; opaque: clients with an opaque contribution; steps: the
    unlearning rounds whose updates are in the sum; anchors: stored round i → client of S_i
    a step taken at M_{i−1} lacked → its noise coefficient c_ij (anchor_noise.py).
    """

    steps: list[int] = field(default_factory=list)
    blocks: dict[int, dict[str, float]] = field(default_factory=dict)
    opaque: set[str] = field(default_factory=set)
    sensitivity: float = 0.0  #: with DP, the summed L2 sensitivities of the held steps
    anchors: dict[int, dict[str, float]] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not self.steps

    def add_exact(self, round_index: int, coefficients: Mapping[str, float]) -> None:
        block = self.blocks.setdefault(round_index, {})
        for client, value in coefficients.items():
            block[client] = block.get(client, 0.0) + float(value)

    def add_anchor(self, round_index: int, terms: Mapping[str, float]) -> None:
        """Note a step taken at M_{i−1}: the noise coefficients c_ij of the clients it lacked."""
        anchor = self.anchors.setdefault(round_index, {})
        for client, value in terms.items():
            anchor[client] = anchor.get(client, 0.0) + float(value)

    def clients(self) -> set[str]:
        out = set(self.opaque)
        for block in self.blocks.values():
            out.update(block)
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "steps": list(self.steps),
            "blocks": {str(i): dict(b) for i, b in sorted(self.blocks.items())},
            "opaque": sorted(self.opaque),
            "sensitivity": self.sensitivity,
            "anchors": {str(i): dict(a) for i, a in sorted(self.anchors.items())},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PendingRelease:
        return cls(
            steps=[int(t) for t in data.get("steps", [])],
            blocks={int(i): {str(c): float(v) for c, v in b.items()} for i, b in data.get("blocks", {}).items()},
            opaque={str(c) for c in data.get("opaque", [])},
            sensitivity=float(data.get("sensitivity", 0.0)),
            anchors={int(i): {str(c): float(v) for c, v in a.items()} for i, a in data.get("anchors", {}).items()},
        )


def anchor_round(history: SharedHistory, point: torch.Tensor, tolerance: float) -> int | None:
    """The first stored round i whose model M_{i−1} equals `point` (‖·‖ ≤ tolerance), else None."""
    for i in range(1, history.num_rounds + 1):
        gap = torch.linalg.vector_norm(point.to(torch.float64) - history.model(i - 1).to(torch.float64))
        if float(gap) <= tolerance:
            return i
    return None


def near_anchor(history: SharedHistory, point: torch.Tensor, reach: float, tolerance: float) -> int | None:
    """The stored round i whose model M_{i−1} is nearest to `point` in units of Stage I's step
    there, among those within reach: d_i = ‖point − M_{i−1}‖ ≤ reach·‖M_i − M_{i−1}‖ (or
    ≤ tolerance); None when no M_{i−1} is that close (anchor_noise.py, "reach")."""
    best: tuple[float, int] | None = None
    for i in range(1, history.num_rounds + 1):
        origin = history.model(i - 1).to(torch.float64)
        gap = float(torch.linalg.vector_norm(point.to(torch.float64) - origin))
        step = float(torch.linalg.vector_norm(history.model(i).to(torch.float64) - origin))
        if gap <= tolerance:
            return i
        if gap <= reach * step and (best is None or gap / step < best[0]):
            best = (gap / step, i)
    return None if best is None else best[1]


def _ratio_classes(block: Mapping[str, float], public: Mapping[str, float]) -> list[set[str]]:
    """Clients of both, grouped by equal ratio block[j]/public[j] (within RATIO_TOL)."""
    classes: list[tuple[float, set[str]]] = []
    for client in sorted(set(block) & set(public)):
        ratio = block[client] / public[client]
        for value, members in classes:
            if abs(ratio - value) <= RATIO_TOL * max(abs(ratio), abs(value)):
                members.add(client)
                break
        else:
            classes.append((ratio, {client}))
    return [members for _, members in classes]


def _options(block: Mapping[str, float], public: Mapping[str, float]) -> list[frozenset[str]]:
    """Client sets left at one point: b = 0 (the block itself) or one ratio class cancelled."""
    both = set(block) | set(public)
    return [frozenset(block)] + [frozenset(both - members) for members in _ratio_classes(block, public)]


def stage1_coefficients(history: SharedHistory, i: int) -> dict[str, float]:
    """G_i's FedAvg coefficients n_j/N_i over the clients of stored round i."""
    info = history.round_info(i)
    total = sum(info.n_samples[c] for c in info.clients)
    return {c: info.n_samples[c] / total for c in info.clients}


def enrolled_principals(history: SharedHistory) -> dict[str, str]:
    """client → principal over the stored rounds (a client not listed is its own principal)."""
    out: dict[str, str] = {}
    for i in range(1, history.num_rounds + 1):
        out.update(history.round_info(i).principals)
    return out


def release_support(pending: PendingRelease, history: SharedHistory) -> int:
    """The smallest principal count of a nonzero combination of the pending update with Stage I
    aggregates (clients enrolled for one principal count once; unlearning.weight_cap).

    Returns 0 only for an update without contributions.
    """
    principals = enrolled_principals(history)

    def count(clients: frozenset[str]) -> int:
        return len({principal_of(c, principals) for c in clients})

    per_point = [_options(b, stage1_coefficients(history, i)) for i, b in sorted(pending.blocks.items())]
    opaque = frozenset(pending.opaque)
    total = 1
    for options in per_point:
        total *= len(options)
    if total <= EXACT_LIMIT:
        sizes = [count(opaque.union(*choice)) for choice in itertools.product(*per_point)]
    else:  # too many to enumerate: a lower bound (opaque clients always stay; else some point keeps a set)
        smallest = min((count(o) for options in per_point for o in options if o), default=0)
        sizes = [count(opaque) if opaque else smallest]
    nonzero = [s for s in sizes if s > 0]
    return min(nonzero) if nonzero else 0


def revealable(pending: PendingRelease, history: SharedHistory, min_cohort: int) -> tuple[bool, int]:
    """(reveal now?, support): reveal iff the support is ≥ k (`min_cohort`)."""
    support = release_support(pending, history)
    return support >= min_cohort, support


def classify(
    participants: Sequence[str],
    weights: Mapping[str, float],
    eta: float,
    exact_here: Iterable[str],
    stored_at_origin: Iterable[str],
) -> tuple[dict[str, float], dict[str, float], set[str]]:
    """Split one step's contributions: (exact at M̂_t, stored g_r at M_{r−1}, opaque clients).

    `exact_here`: clients whose ĝ is an exact vector at M̂_t; `stored_at_origin`: clients
    whose ĝ is their stored gradient (no pair); the rest are opaque.
    """
    here, origin = set(exact_here), set(stored_at_origin) - set(exact_here)
    exact = {c: eta * weights[c] for c in participants if c in here}
    stored = {c: eta * weights[c] for c in participants if c in origin}
    return exact, stored, {c for c in participants if c not in here and c not in origin}
