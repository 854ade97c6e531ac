"""Round selection (Starfish §IV-A, Algorithm 1 SecRS; Appendix C, Algorithm 6 SecRS(alt)).

The score of stored round i is the cosine between the target's upload and the round's
global step (Equation 1). Clients upload gradients g (the descent direction is −g) and
M_i − M_{i−1} = −η_l·G_i^agg, so the literal ⟨g_i^t, M_i − M_{i−1}⟩ of Equation 1 is
negative for a target that pushed the model and would pick the LEAST aligned rounds. We use
d_i = (M_{i−1} − M_i)/‖M_{i−1} − M_i‖ (public, unit length), i.e. τ_i = cos(g_i^t, G_i^agg).
Dividing the public vector by its norm leaves every ratio u_i/v_i unchanged and keeps the
fixed-point magnitudes near those of the gradients.

* Method 1 (Algorithm 1 lines 4–9): u_i = ⟨[g_i^t], d_i⟩ and v_i = [‖g_i^t‖] (client-reported)
  are local; the T pairs are sorted by a bitonic network comparing with SecGE2
  (u_i·v_j ≥ u_j·v_i, no division).
* Method 2 (lines 11–17): τ_i = SecDiv(u_i, v_i), sorted with SecGE.
* SecRS(alt) (Algorithm 6): no client-reported norm. v_i = ⟨[g],[g]⟩·‖d_i‖² (= ‖g‖²),
  w_i = [u_i ≥ 0], a_i = u_i²; rows (w_i, a_i, v_i) are sorted with SecGE4 (Method 1 form,
  no division) or rows (w_i, b_i = SecDiv(a_i, v_i)) with SecGE3 (Method 2 form), both
  ordering by the signed squared cosine (2w_i − 1)·a_i/v_i (`mpc.protocols.secge`).

Several targets: the score of round i is the cosine between the targets' combined
(sample-weighted FedAvg) upload g_i^C = Σ_t n_t g_i^t / Σ_t n_t and d_i. A combined upload has
no client-reported norm, so selection for several targets always takes the SecRS(alt) path
(with the Method 1 or Method 2 comparison chosen as for one target). A round in which no
target took part, or whose global step is null (M_i = M_{i−1}), scores 0.

Only the SET of the top T′ = ⌈σT⌉ rounds is revealed, in round order (`Backend.top_set`,
`mpc/protocols/sectop.py`). **Deviations**: lines 19–22 open the top T′ payload entries in
rank order, which tells who aligned best with the targets; the set alone is opened instead.
And the order comes from every pairwise comparison at once (one call of the same SecGE2,
SecGE, SecGE4 or SecGE3, then ranks and one comparison with T′) rather than the SecSrt
network of lines 8/15, which needs O(log² T) comparison rounds; above
`sectop.PAIRWISE_MAX_ROWS` stored rounds the network sorts the rounds and the top T′
indices are sorted by themselves before they are opened. Ties go to the earlier round.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from mpc.backend import Backend, Secret
from unlearning.history import SharedHistory
from unlearning.lbfgs import squared_norms
from unlearning.starfish.params import StarfishParams
from unlearning.strategy import UnlearnContext


@dataclass(frozen=True)
class Selection:
    """Outcome of SecRS (public)."""

    rounds: tuple[int, ...]  #: the revealed top-T′ round indices, in training order (never the rank order)
    method: str  #: "method1", "method2", "alt-method1" or "alt-method2"

    def __post_init__(self) -> None:
        if list(self.rounds) != sorted(set(self.rounds)):
            raise ValueError(f"selected rounds must be distinct and sorted by round index, got {self.rounds}")


class RoundSelector(ABC):
    """How Starfish picks the T′ stored rounds it replays (Algorithm 4, step 2)."""

    #: short name shown in progress events
    label: str = "abstract"

    @abstractmethod
    def select(self, ctx: UnlearnContext, params: StarfishParams, count: int) -> Selection:
        """The `count` rounds to replay, sorted by round index."""


class SecRSSelector(RoundSelector):
    """The paper's selection: SecRS (Algorithm 1) or SecRS(alt) (Algorithm 6), as `params` say."""

    label = "SecRS"

    def select(self, ctx: UnlearnContext, params: StarfishParams, count: int) -> Selection:
        total = ctx.history.num_rounds
        with ctx.backend.step("RS"):
            return select_rounds(
                ctx.backend, ctx.history, ctx.targets, count, params.comparison(total), alt=params.method == "alt"
            )


def direction(history: SharedHistory, i: int) -> torch.Tensor:
    """d_i = (M_{i−1} − M_i)/‖M_{i−1} − M_i‖ (public, (m,)); 0 for a null step."""
    step = history.model(i - 1).to(torch.float64) - history.model(i).to(torch.float64)
    norm = torch.linalg.vector_norm(step)
    return step / norm if norm > 0 else torch.zeros_like(step)


def _constant(backend: Backend, value: float, n: int = 1) -> Secret:
    return backend.add(backend.zeros((n,)), float(value))


def _combined_upload(backend: Backend, history: SharedHistory, i: int, present: Sequence[str]) -> Secret:
    """g_i^C = Σ_t n_t g_i^t / Σ_t n_t over the targets present in round i (local), shape (1, m)."""
    info = history.round_info(i)
    weights = torch.tensor([float(info.n_samples[t]) for t in present], dtype=torch.float64)
    weights = (weights / weights.sum()).reshape(1, len(present))
    return backend.matmul(weights, history.gradients(backend, i, list(present)))


def _pair_scores(backend: Backend, history: SharedHistory, targets: Sequence[str], alt: bool) -> tuple[Secret, Secret]:
    """(u, v) of shape (T,) each: v is the reported norm, or ‖g‖² for alt.

    Streamed one stored round at a time (its upload and d_i, then dropped), so the memory
    held is one round's, whatever T is: u_i = ⟨[g_i], d_i⟩ is local with one truncation
    after the sum; for alt, ⟨[g_i], [g_i]⟩ is one scalar product per round.
    """
    u_parts: list[Secret] = []
    v_parts: list[Secret] = []
    for i in range(1, history.num_rounds + 1):
        present = [t for t in targets if t in history.round_info(i).clients]
        d = direction(history, i)
        if not present or not bool(d.any()):  # no target, or a null global step: score 0 (u = 0, v = 1)
            u_parts.append(_constant(backend, 0.0))
            v_parts.append(_constant(backend, 1.0))
            continue
        g = _combined_upload(backend, history, i, present) if alt else history.gradients(backend, i, present)
        m = d.numel()
        u_parts.append(backend.reshape(backend.matmul(backend.reshape(g, (1, 1, m)), d.reshape(1, m, 1)), (1,)))
        if alt:
            v_parts.append(backend.mul(squared_norms(backend, g), float((d * d).sum())))
        else:
            v_parts.append(backend.reshape(history.norms(backend, i, present), (1,)))
    return backend.cat(u_parts, dim=0), backend.cat(v_parts, dim=0)


def select_rounds(
    backend: Backend,
    history: SharedHistory,
    targets: Sequence[str],
    selected_count: int,
    comparison: str,
    alt: bool,
) -> Selection:
    """SecRS: the top `selected_count` stored rounds by the score of the module docstring.

    `comparison` is "method1" (SecGE2 on pairs, no division) or "method2" (SecDiv then
    SecGE); `alt` selects SecRS(alt) (no client-reported norms). Several targets force `alt`.
    """
    if comparison not in ("method1", "method2"):
        raise ValueError(f"unknown round-selection comparison {comparison!r}")
    alt = alt or len(targets) > 1
    u, v = _pair_scores(backend, history, targets, alt)
    if alt:
        w = backend.ge(u, 0.0)  # w_i = [u_i ≥ 0]
        a = backend.mul(u, u)  # a_i = u_i²
        if comparison == "method1":
            keys, method = backend.stack([w, a, v], dim=1), "ge4"
        else:
            keys, method = backend.stack([w, backend.div(a, v)], dim=1), "ge3"
    elif comparison == "method1":
        keys, method = backend.stack([u, v], dim=1), "ge2"
    else:
        keys, method = backend.div(u, v), "ge"
    chosen = backend.top_set(keys, selected_count, method)
    return Selection(rounds=tuple(i + 1 for i in chosen), method=f"alt-{comparison}" if alt else comparison)
