"""Threshold checking (Starfish §IV-C, Algorithm 3 SecTC) and the correction it triggers.

Every T_c-th unlearning round the parties compute, for each remaining client j of the
round, the public flag f^j = 1 iff some coordinate satisfies |ĝ^j(k)| > δ^j (the paper's
rule; `Backend.threshold_flags`). Flagged clients are asked for their exact gradient at
M̂_t (Algorithm 4 lines 17–18); an answer replaces the estimate, a client that does not
answer keeps its estimate and is recorded as missing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import torch

from mpc.backend import Backend, Secret
from unlearning.errors import UnlearningError
from unlearning.history import GradientOracle, GradientRequest
from unlearning.starfish.run_log import StarfishLog
from unlearning.starfish.state import StarfishState


def client_thresholds(backend: Backend, state: StarfishState, clients: Sequence[str]) -> Secret:
    """[δ^j] for `clients` (a sub-list of the state's remaining clients), shape (n,)."""
    position = {c: k for k, c in enumerate(state.clients)}
    return backend.cat([backend.index(state.deltas, slice(position[c], position[c] + 1)) for c in clients], dim=0)


def check_sample(m: int, size: int, t: int) -> torch.Tensor | None:
    """The public coordinates checked first in round t (both parties derive the same set from t)."""
    if size <= 0 or size >= m:
        return None
    return torch.randperm(m, generator=torch.Generator().manual_seed(t))[:size]


def flags_for(
    backend: Backend, state: StarfishState, clients: Sequence[str], estimates: Secret, sample: torch.Tensor | None
) -> list[bool]:
    """SecTC: revealed correction flags, one per client (Algorithm 3), optionally sample-first."""
    flags = backend.threshold_flags(estimates, client_thresholds(backend, state, clients), sample)
    return [bool(f) for f in flags.reshape(-1).tolist()]


def replace_rows(backend: Backend, rows: Secret, clients: Sequence[str], answers: Mapping[str, Secret]) -> Secret:
    """Rows of `rows` with each answered client's exact gradient in place of its estimate."""
    out = []
    for idx, client in enumerate(clients):
        exact = answers.get(client)
        if exact is None:
            out.append(backend.index(rows, slice(idx, idx + 1)))
        else:
            out.append(backend.reshape(exact, (1, rows.shape[1])))
    return backend.cat(out, dim=0)


class AskingState(Protocol):
    """What `ask_exact` reads and writes of a run's state: the public model and its log."""

    model: torch.Tensor
    log: StarfishLog


def ask_exact(
    backend: Backend,
    oracle: GradientOracle,
    state: AskingState,
    where: tuple[int, int],
    clients: Sequence[str],
    reason: str,
) -> dict[str, Secret]:
    """Ask `clients` for their exact gradient at the public model M̂ in unlearning round t with
    the data order of stored round r (`where` = (t, r)); returns the answers received and
    records the ask in the log (raises `UnlearningError` for an answer of the wrong shape)."""
    t, r = where
    request = GradientRequest(
        model=state.model.to(torch.float32), unlearning_round=t, original_round=r, clients=tuple(clients), reason=reason
    )
    replies: Mapping[str, Secret | None] = oracle.exact_gradients(backend, request)
    m = state.model.numel()
    answers: dict[str, Secret] = {}
    for client in clients:
        reply = replies.get(client)
        if reply is None:
            continue
        if tuple(reply.shape) != (m,):
            raise UnlearningError(
                f"client {client!r} answered the {reason} of round {t} with shape {tuple(reply.shape)}, expected ({m},)"
            )
        answers[client] = reply
    state.log.record_ask(t, r, reason, clients, list(answers))
    return answers
