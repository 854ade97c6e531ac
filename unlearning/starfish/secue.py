"""Update estimation (Starfish §IV-B, Algorithm 2 SecUE) with the compact L-BFGS product.

For remaining client j in unlearning round t replaying stored round r (gradient g_r^j taken
at M_{r−1}), with v = M̂_t − M_{r−1} (public):

    ĝ_t^j = g_r^j + H^j v      (FedRecover's estimate; H^j from client j's B latest pairs)

where H^j v is `unlearning.lbfgs.hessian_vector_product` on the client's pairs
s = M̂ − M_{r−1} (public) and y = g_exact^j(M̂) − g_r^j (secret), collected whenever the client
computed an exact gradient (warm-up and correction). Pairs are normalised by the public ‖s‖,
v by the public ‖v‖ (the product is linear in v), and the safeguards of `unlearning.lbfgs`
apply. The FedAvg aggregate Ĝ_t = Σ_j n_j ĝ_t^j / Σ_j n_j is the only value revealed
(`unlearning.fedavg.reveal_aggregate`), and M̂_{t+1} = M̂_t − η_u·Ĝ_t (Equation 2).

The two functions read and write only a `PairStore` (the clients' pair buffers and a log
of inverses and curvature bits) and the `SecUESettings` below, so FedRecover
(`unlearning.baselines.fedrecover`) runs the same estimation with its own state.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Protocol

import torch

from mpc.backend import Backend, Secret
from unlearning.lbfgs import bounded_correction, curvature_accepted, hessian_vector_product
from unlearning.starfish.run_log import CurvatureEntry
from unlearning.starfish.state import CurvaturePair


class PairLog(Protocol):
    """Where the estimation records its work: SecMI inverses and curvature bits."""

    inverses: int
    curvature: list[CurvatureEntry]


class PairStore(Protocol):
    """The L-BFGS pairs of every client (latest last) and the log (`StarfishState` is one)."""

    @property
    def buffers(self) -> dict[str, list[CurvaturePair]]: ...

    @property
    def log(self) -> PairLog: ...


class SecUESettings(Protocol):
    """The parameters SecUE reads (`StarfishParams` and `FedRecoverParams` both carry them)."""

    @property
    def buffer_size(self) -> int: ...

    @property
    def curvature_eps(self) -> float: ...

    @property
    def curvature_max(self) -> float: ...

    @property
    def hv_bound(self) -> float: ...

    @property
    def inverse(self) -> str: ...

    @property
    def min_step(self) -> float: ...


def add_pairs(
    backend: Backend,
    state: PairStore,
    clients: Sequence[str],
    t: int,
    s: torch.Tensor,
    exact: Secret,
    stored: Secret,
    params: SecUESettings,
) -> None:
    """Offer the pair (s, y = exact − stored) to each client's buffer (keeps the B latest).

    A degenerate step (‖s‖ ≤ min_step, public) gives no pair. Otherwise one bit per client
    is revealed (`unlearning.lbfgs.curvature_accepted`) and the pair is kept only if it holds;
    it is stored normalised (ŝ = s/‖s‖, ŷ = y/‖s‖, ‖ŷ‖ ≤ κ once accepted).
    """
    norm = float(torch.linalg.vector_norm(s))
    if not clients or norm <= params.min_step:
        return
    s = s.to(torch.float64)
    y = backend.sub(exact, stored)
    accepted = curvature_accepted(backend, s, y, params.curvature_eps, params.curvature_max)
    for idx, client in enumerate(clients):
        state.log.curvature.append(CurvatureEntry(t, client, bool(accepted[idx])))
    keep = [idx for idx in range(len(clients)) if accepted[idx]]
    if not keep:
        return
    s_hat = s / norm
    y_hat = backend.mul(backend.index(y, torch.tensor(keep, dtype=torch.long)), 1.0 / norm)  # accepted rows only
    for row, idx in enumerate(keep):
        pair = CurvaturePair(round=t, s=s_hat, y=backend.index(y_hat, row))
        state.buffers[clients[idx]] = (state.buffers.get(clients[idx], []) + [pair])[-params.buffer_size :]


def estimate_gradients(
    backend: Backend,
    state: PairStore,
    clients: Sequence[str],
    stored: Secret,
    v: torch.Tensor,
    params: SecUESettings,
    norms: Secret | None = None,
) -> Secret:
    """[ĝ^j] = [g_r^j] + H^j v for `clients` (rows of `stored`), shape (n, m).

    Clients are batched by buffer length; a client with no accepted pair keeps g_r^j.
    `norms`: the clients' reported [‖g_r^j‖] (n,), used for the ‖Hv‖ bound when given.
    """
    n, m = stored.shape
    v = v.to(torch.float64)
    v_norm = float(torch.linalg.vector_norm(v))
    groups: dict[int, list[int]] = defaultdict(list)
    for idx, client in enumerate(clients):
        groups[len(state.buffers.get(client, []))].append(idx)
    rows: dict[int, Secret] = {}
    for k, members in groups.items():
        g_group = backend.cat([backend.index(stored, slice(i, i + 1)) for i in members], dim=0)
        if k == 0 or v_norm <= params.min_step:
            estimate = g_group
        else:
            pairs = [state.buffers[clients[i]] for i in members]
            s = torch.stack([torch.stack([p.s for p in ps], dim=1) for ps in pairs])  # (n_g, m, k)
            y = backend.stack([backend.stack([p.y for p in ps], dim=1) for ps in pairs])
            state.log.inverses += len(members)
            hv_unit = hessian_vector_product(backend, s, y, v / v_norm, params.inverse)
            g_norms = (
                None if norms is None else backend.cat([backend.index(norms, slice(i, i + 1)) for i in members], dim=0)
            )
            kept = bounded_correction(backend, hv_unit, g_group, params.hv_bound, v_norm, g_norms)
            estimate = backend.add(g_group, backend.mul(kept, v_norm))
        for pos, i in enumerate(members):
            rows[i] = backend.index(estimate, slice(pos, pos + 1))
    return backend.cat([rows[i] for i in range(n)], dim=0)
