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

Per buffer state each client's compact form (A = SᵀY, YᵀY, σ_k, K⁻¹; `PairCache`) is
cached in the store and rebuilt — one SecMI for all stale clients together — only when a
pair has entered; the new row of YᵀY is computed when the pair enters (its diagonal ‖ŷ‖²
is the curvature check's squared norm, a scalar product of the rows fixed for it). Per
round the bound of safeguard 2 uses cᵀGc (no m-sized square), its shared bit is multiplied into the 1 + 2k coefficients
(exact, a bit), and one secret product Y·c_y per client expands them to length m. That
product is a fixed-operand one (`mpc.plane.fixed_beaver`): each pair's rows are opened
under a mask once, when it enters — ŷ after a step with ‖s‖ ≥ 1, else the raw y the
curvature test fixed, held with the public scale 1/‖s‖ that goes on the other factor of
each product (`unlearning.lbfgs`, "held rows") — (again on its first use in a later session:
`current_fixed`; the handle lives on the `CurvaturePair`, never in a checkpoint), so a
round opens only the k·n values of c_y instead of Y, and the new row of YᵀY (ŷ against
the pairs it joins) comes from the same openings with the dealer's [B_iᵀB_j], opening nothing.

Where nothing reads a client's row (an estimate round without SecTC or DP), only the update
U_t = Σ_j ω_j ĝ_t^j is formed (`estimate_update`, `lbfgs.expand_sum`): the product is
[c_y,1 … c_y,n]·[Y_1; …; Y_n], whose dealer pair has m elements instead of n·m. A round's
terms (`round_terms`: per buffer-length group, bit·c and the operands) are computed once and
then expanded to rows (`expand_terms`, for some clients or some public columns) or summed
(`sum_terms`), so a check round forms rows only where SecTC compares them (`sample_first`).

The functions read and write only a `PairStore` (the clients' pair buffers, their
cached forms and a log of inverses and curvature bits) and the `SecUESettings` below, so
FedRecover (`unlearning.baselines.fedrecover`) runs the same estimation with its own state.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Collection, Sequence
from typing import Protocol

import torch

from mpc.backend import Backend, Fixed, Prepared, Secret
from unlearning.fedavg import weighted_sum
from unlearning.lbfgs import (
    ClientRows,
    CompactForm,
    coefficients,
    compact_form,
    correction_kept,
    curvature_accepted,
    expand,
    expand_sum,
    gram,
    product_square,
    squared_norms,
    unit_scale,
)
from unlearning.starfish.run_log import CurvatureEntry
from unlearning.starfish.state import CurvaturePair, PairCache


class PairLog(Protocol):
    """Where the estimation records its work: SecMI inverses and curvature bits."""

    inverses: int
    curvature: list[CurvatureEntry]


class PairStore(Protocol):
    """The L-BFGS pairs of every client (latest last), their cached forms and the log (`StarfishState` is one)."""

    @property
    def buffers(self) -> dict[str, list[CurvaturePair]]: ...

    @property
    def forms(self) -> dict[str, PairCache]: ...

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
    is revealed (`unlearning.lbfgs.curvature_accepted`, `_checked_rows`) and the pair is kept
    only if it holds; it is stored normalised (ŝ = s/‖s‖, ŷ = y/‖s‖, ‖ŷ‖ ≤ κ once accepted),
    fixed for products, with its row of YᵀY against the B − 1 pairs it joins. ŷ is held as
    the rows the curvature test fixed and a public scale (`CurvaturePair`): ŷ itself (scale 1)
    after a step with ‖s‖ ≥ 1, the raw y and 1/‖s‖ after a shorter one, so every entry opens
    its rows once. The held rows are the fixed handle's sharing (`Backend.fixed_secret`).
    """
    norm = float(torch.linalg.vector_norm(s))
    if not clients or norm <= params.min_step:
        return
    s = s.to(torch.float64)
    accepted, new, diag, scale = _checked_rows(backend, s, norm, backend.sub(exact, stored), params)
    for idx, client in enumerate(clients):
        state.log.curvature.append(CurvatureEntry(t, client, bool(accepted[idx])))
    keep = [idx for idx in range(len(clients)) if accepted[idx]]
    if not keep:
        return
    stays = max(params.buffer_size - 1, 0)
    joined = {pos: _joined(state, clients[idx], stays) for pos, idx in enumerate(keep)}
    cross = _cross_products(backend, state, new, scale, joined)
    s_hat = s / norm  # one tensor for every client's pair of this round
    for pos, idx in enumerate(keep):
        own = backend.index(diag, slice(pos, pos + 1))
        yy = own if pos not in cross else backend.cat([cross[pos], own], dim=0)
        y_kept = backend.fixed_secret(new[pos])  # the rows held once: the handle's sharing
        pair = CurvaturePair(round=t, s=s_hat, y=y_kept, yy=yy, fixed=new[pos], scale=scale)
        state.buffers[clients[idx]] = (state.buffers.get(clients[idx], []) + [pair])[-params.buffer_size :]


def _checked_rows(
    backend: Backend, s: torch.Tensor, norm: float, y: Secret, params: SecUESettings
) -> tuple[torch.Tensor, list[Fixed], Secret, float]:
    """Safeguard 1 on the offered rows y (n, m), then the kept rows fixed for products, their
    ‖ŷ‖² (the new diagonal entries of YᵀY) and the held rows' public scale: (public bits
    (n,), handles, [‖ŷ‖²], scale), with ŷ = scale·(the fixed rows).

    One opening: the offered rows are fixed (y − B, as a Beaver square would open y − A) and
    the squared norms are scalar products of fixed operands (the dealer sends one ring
    element per row, `Backend.fixed_dot`) where a square's pair costs n·m. With ‖s‖ ≥ 1
    (public) the rows are normalised first, ŷ = y/‖s‖, the test is taken on (ŝ, ŷ) (the
    same two inequalities divided by ‖s‖², and ‖ŷ‖ ≤ ‖y‖, so nothing larger is squared than
    the raw rows) and the fixed rows are ŷ (scale 1). With ‖s‖ < 1, ŷ may exceed the ring's
    range when squared, so the test is taken on the raw y (at gradient scale), the fixed
    rows are the raw y and the scale 1/‖s‖ goes on the other factor of every product
    (`unlearning.lbfgs`, "held rows"); ‖ŷ‖² = ‖y‖²/‖s‖²."""
    n = y.shape[0]
    eps, kappa = params.curvature_eps, params.curvature_max
    if norm >= 1.0:
        s, y, scale = s / norm, backend.mul(y, 1.0 / norm), 1.0
    else:
        scale = 1.0 / norm
    fixed = backend.fix([backend.index(y, i) for i in range(n)])  # the one opening
    accepted, squares = curvature_accepted(backend, s, y, eps, kappa, backend.fixed_dot(fixed, fixed))
    del y  # the offered rows are held by their handles from here
    kept = [i for i in range(n) if accepted[i]]
    squares = backend.index(squares, torch.tensor(kept, dtype=torch.long))
    return accepted, [fixed[i] for i in kept], backend.mul(squares, scale**2) if scale != 1.0 else squares, scale


def _joined(state: PairStore, name: str, stays: int) -> list[tuple[str, int]]:
    """The (client, position) of the pairs a new pair of `name` joins: the `stays` latest."""
    held = len(state.buffers.get(name, []))
    return [(name, i) for i in range(max(held - stays, 0), held)]


def _cross_products(
    backend: Backend, state: PairStore, new: list[Fixed], scale: float, joined: dict[int, list[tuple[str, int]]]
) -> dict[int, Secret]:
    """[ŷ_newᵀŷ] of each new pair (`new[pos]`, fixed rows of scale `scale`) with the pairs it
    joins, oldest first: scalar products of the fixed rows (`Backend.fixed_dot`, nothing
    opened) times the public scales of both (ŷ = scale·y)."""
    members = [(pos, member) for pos, held in joined.items() for member in held]
    if not members:
        return {}
    olds = current_fixed(backend, state, [member for _, member in members])
    dots = backend.fixed_dot([new[pos] for pos, _ in members], olds)
    scales = torch.tensor([scale * state.buffers[name][i].scale for _, (name, i) in members], dtype=torch.float64)
    if not unit_scale(scales):
        dots = backend.mul(dots, scales)
    out: dict[int, Secret] = {}
    start = 0
    for pos, held in joined.items():
        if held:
            out[pos] = backend.index(dots, slice(start, start + len(held)))
            start += len(held)
    return out


@dataclasses.dataclass(frozen=True)
class GroupTerms:
    """The expansion terms of the round's clients holding k ≥ 1 pairs each (`round_terms`):
    their positions `members` in the round, the ŝ stacks, the held rows (client-major, k per
    client), bit·c (n_g, 1 + 2k) and the rows' scales, with H^j v = ‖v‖·[v̂, S_j, Y_j]·c_j."""

    members: list[int]
    s_rows: list[Prepared]
    y_rows: list[Fixed]
    c: Secret
    y_scale: torch.Tensor | None

    def among(self, backend: Backend, positions: Collection[int]) -> GroupTerms | None:
        """The terms of the members at `positions` only (None when none is)."""
        keep = [i for i, p in enumerate(self.members) if p in positions]
        if len(keep) == len(self.members):
            return self
        if not keep:
            return None
        k = len(self.y_rows) // len(self.members)
        return GroupTerms(
            [self.members[i] for i in keep],
            [self.s_rows[i] for i in keep],
            [self.y_rows[i * k + j] for i in keep for j in range(k)],
            backend.index(self.c, torch.tensor(keep, dtype=torch.long)),
            None if self.y_scale is None else self.y_scale[keep],
        )


def round_terms(
    backend: Backend,
    state: PairStore,
    clients: Sequence[str],
    stored: Secret,
    v: torch.Tensor,
    params: SecUESettings,
    norms: Secret | None = None,
) -> list[GroupTerms]:
    """The terms of each group of `clients` (rows of `stored`) holding k ≥ 1 pairs; none when
    ‖v‖ ≤ min_step (every estimate is then g_r^j). `norms`: the clients' reported [‖g_r^j‖]
    (n,), used for the ‖Hv‖ bound when given. The groups' squared norms are taken together
    and safeguard 2 compares every group's clients in one comparison (its rounds once per
    round, not once per group)."""
    n, _ = stored.shape
    v = v.to(torch.float64)
    v_norm = float(torch.linalg.vector_norm(v))
    if v_norm <= params.min_step:
        return []
    groups = [(k, members) for k, members in _by_buffer_length(state, clients).items() if k > 0]
    if not groups:
        return []
    held = sorted(p for _, members in groups for p in members)
    g2 = _group_squares(backend, stored, norms, held, len(held) == n)
    at = {p: i for i, p in enumerate(held)}
    parts = []
    for _, members in groups:
        names = [clients[i] for i in members]
        parts.append(_group_terms(backend, state, names, v / v_norm, params))
    hv2 = backend.cat([part.hv2 for part in parts], dim=0)
    order = torch.tensor([at[p] for _, members in groups for p in members], dtype=torch.long)
    bits = correction_kept(backend, hv2, backend.index(g2, order), params.hv_bound, v_norm)
    terms, start = [], 0
    for (_, members), part in zip(groups, parts, strict=True):
        bit = backend.reshape(backend.index(bits, slice(start, start + len(members))), (len(members), 1))
        start += len(members)
        terms.append(GroupTerms(members, part.s_rows, part.y_rows, backend.mul(part.c, bit), part.y_scale))
    return terms


def expand_terms(
    backend: Backend,
    terms: Sequence[GroupTerms],
    stored: Secret,
    v: torch.Tensor,
    positions: Sequence[int] | None = None,
    cols: torch.Tensor | None = None,
) -> Secret:
    """[ĝ^j] = [g_r^j] + H^j v of the clients at the increasing `positions` (all rows of
    `stored`: None) on the public coordinates `cols` (all: None): (len, |cols|). A client
    in no group keeps g_r^j."""
    rows = list(range(stored.shape[0])) if positions is None else list(positions)
    v = v.to(torch.float64)
    v_norm = float(torch.linalg.vector_norm(v))
    base = stored if positions is None else backend.index(stored, torch.tensor(rows, dtype=torch.long))
    if cols is not None:
        base = backend.index(base, (slice(None), cols))
    groups = [g for g in (t.among(backend, set(rows)) for t in terms) if g is not None]
    at = {p: i for i, p in enumerate(rows)}
    out: dict[int, Secret] = {}
    for g in groups:
        whole = len(g.members) == len(rows)  # one group: no copies of the rows
        g_base = base if whole else backend.index(base, torch.tensor([at[p] for p in g.members], dtype=torch.long))
        estimate = expand(
            backend, g.s_rows, g.y_rows, v / v_norm, g.c, base=g_base, scale=v_norm, y_scale=g.y_scale, cols=cols
        )
        if whole:
            return estimate
        for pos, p in enumerate(g.members):
            out[at[p]] = backend.index(estimate, slice(pos, pos + 1))
    if not out:
        return base
    return backend.cat([out.get(i, backend.index(base, slice(i, i + 1))) for i in range(len(rows))], dim=0)


def sum_terms(
    backend: Backend, terms: Sequence[GroupTerms], stored: Secret, v: torch.Tensor, weights: Sequence[float]
) -> Secret:
    """[Σ_j ω_j ĝ^j] (m,) for public weights ω_j (one per row of `stored`), formed without the
    rows: Σ_j ω_j g_r^j is local; each group adds ω_max·Σ_j [v̂, S_j, Y_j]·(‖v‖·(ω_j/ω_max)·c_j)
    by `lbfgs.expand_sum` (one fixed-operand product of m elements instead of n·m). The
    ratio ω_j/ω_max ≤ 1 keeps the scaled coefficients at the magnitude of ‖v‖·c (fixed-point
    precision); ω_max multiplies the m-sized sum once. A client of weight 0 adds nothing."""
    n, _ = stored.shape
    if len(weights) != n:
        raise ValueError(f"{len(weights)} weights for {n} clients")
    v = v.to(torch.float64)
    v_norm = float(torch.linalg.vector_norm(v))
    omega = torch.tensor([float(w) for w in weights], dtype=torch.float64)
    update = weighted_sum(backend, stored, weights)
    top = float(omega.abs().max()) if n else 0.0
    weighted = {i for i in range(n) if omega[i] != 0.0}
    corrections: Secret | None = None
    for g in (t.among(backend, weighted) for t in terms):
        if g is None:
            continue
        part = expand_sum(backend, g.s_rows, g.y_rows, v / v_norm, g.c, v_norm * omega[g.members] / top, g.y_scale)
        corrections = part if corrections is None else backend.add(corrections, part)
    return update if corrections is None else backend.add(update, backend.mul(corrections, top))


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
    return expand_terms(backend, round_terms(backend, state, clients, stored, v, params, norms), stored, v)


def estimate_update(
    backend: Backend,
    state: PairStore,
    clients: Sequence[str],
    stored: Secret,
    v: torch.Tensor,
    params: SecUESettings,
    weights: Sequence[float],
    norms: Secret | None = None,
) -> Secret:
    """[Σ_j ω_j ĝ^j] (m,) for public weights ω_j (Algorithm 2 and 4, line 19's sum, without DP):
    the weighted sum of `estimate_gradients`' rows, formed without them (`sum_terms`, which
    checks one weight per client)."""
    terms = round_terms(backend, state, clients, stored, v, params, norms) if any(weights) else []
    return sum_terms(backend, terms, stored, v, weights)


def _by_buffer_length(state: PairStore, clients: Sequence[str]) -> dict[int, list[int]]:
    """The positions of `clients` grouped by how many pairs each holds (one batch per length)."""
    groups: dict[int, list[int]] = defaultdict(list)
    for idx, client in enumerate(clients):
        groups[len(state.buffers.get(client, []))].append(idx)
    return groups


def _group_squares(backend: Backend, stored: Secret, norms: Secret | None, members: list[int], whole: bool) -> Secret:
    """[‖g_r^j‖²] of the clients at positions `members`: from their reported norms when given
    (one product per client), else from their stored rows (one scalar product each)."""
    pick = torch.tensor(members, dtype=torch.long)
    if norms is None:
        return squared_norms(backend, stored if whole else backend.index(stored, pick))
    return backend.square(norms if whole else backend.index(norms, pick))


@dataclasses.dataclass(frozen=True)
class _GroupParts:
    """A group's operands before safeguard 2: ŝ stacks, fixed held rows, c (n_g, 1 + 2k),
    the held rows' scales and ‖H v̂‖² (n_g,)."""

    s_rows: list[Prepared]
    y_rows: list[Fixed]
    c: Secret
    y_scale: torch.Tensor | None
    hv2: Secret


def _group_terms(
    backend: Backend, state: PairStore, names: list[str], v_hat: torch.Tensor, params: SecUESettings
) -> _GroupParts:
    """The operands of clients holding k pairs each: H^j v = ‖v‖·[v̂, S, Y]·c (Algorithm 2,
    compact form) and ‖H v̂‖² = cᵀGc for safeguard 2's bound ‖Hv‖ ≤ c·‖g‖ (`round_terms`)."""
    n = len(names)
    s = ClientRows(lambda c: torch.stack([p.s for p in state.buffers[names[c]]]), n)  # (k, m) public each
    y = ClientRows(lambda c: backend.stack([p.y for p in state.buffers[names[c]]]), n)  # (k, m) held rows each
    y_scale = held_scales(state, names)
    form = cached_forms(backend, state, names, s, y, params.inverse, y_scale)
    s_rows = [prepared_rows(backend, state, name) for name in names]
    s_public = [rows.value for rows in s_rows]  # (k, m) each: one tensor for pairs of the same rounds
    c, yv = coefficients(backend, form, s_public, y, v_hat, y_scale)
    hv2 = product_square(backend, form, s_public, v_hat, yv, c)
    return _GroupParts(s_rows, fixed_rows(backend, state, names), c, y_scale, hv2)


def held_scales(state: PairStore, names: list[str]) -> torch.Tensor | None:
    """The public scales (n, k) of the clients' held rows (ŷ = scale·y, `CurvaturePair`);
    None when every one is 1."""
    scales = torch.tensor([[p.scale for p in state.buffers[name]] for name in names], dtype=torch.float64)
    return None if unit_scale(scales) else scales


def fixed_rows(backend: Backend, state: PairStore, names: list[str]) -> list[Fixed]:
    """The clients' ŷ rows fixed for the products Y·c_y (`Backend.fix`), client-major."""
    return current_fixed(backend, state, [(name, i) for name in names for i in range(len(state.buffers[name]))])


def current_fixed(backend: Backend, state: PairStore, members: list[tuple[str, int]]) -> list[Fixed]:
    """The handles of the pairs `members` ((client, position) each), valid in this session.

    A pair is fixed when it enters (`add_pairs`); a pair without a handle (loaded from a
    checkpoint) or with one of an earlier session is fixed again here, all of them together
    (one opening), and its [ŷ] becomes the new handle's sharing (held once). Both parties hold
    the same pairs, so they fix the same ones in the same order.
    """
    stale = [
        (name, i)
        for name, i in members
        if state.buffers[name][i].fixed is None or not backend.fixed_current(state.buffers[name][i].fixed)
    ]
    handles = backend.fix([state.buffers[name][i].y for name, i in stale])
    for (name, i), handle in zip(stale, handles, strict=True):
        pairs = list(state.buffers[name])
        pairs[i] = dataclasses.replace(pairs[i], y=backend.fixed_secret(handle), fixed=handle)
        state.buffers[name] = pairs
    return [state.buffers[name][i].fixed for name, i in members]  # type: ignore[misc]


def prepared_rows(backend: Backend, state: PairStore, name: str) -> Prepared:
    """The client's ŝ rows (k, m) prepared for products, once per buffer state (kept in its cache);
    its pairs' ŝ become views of the same rows. A round's ŝ is the same for every client
    (`add_pairs`), so clients whose cached forms hold pairs of the same rounds share one
    prepared stack: held once, not once per client."""
    form = state.forms[name]
    if form.s_rows is None:
        same = (f.s_rows for f in state.forms.values() if f.s_rows is not None and f.rounds == form.rounds)
        prepared = next(same, None) or backend.prepare(torch.stack([p.s for p in state.buffers[name]]))
        # each ŝ becomes a row of the stack: held once, not beside a stacked copy
        state.buffers[name] = [dataclasses.replace(p, s=prepared.value[i]) for i, p in enumerate(state.buffers[name])]
        form = state.forms[name] = dataclasses.replace(form, s_rows=prepared)
    return form.s_rows


def cached_forms(
    backend: Backend,
    state: PairStore,
    names: list[str],
    s: Sequence[torch.Tensor],
    y: Sequence[Secret],
    inverse: str,
    y_scale: torch.Tensor | None = None,
) -> CompactForm:
    """The clients' compact forms (n stacked), rebuilding the stale ones together (one SecMI batch).

    `s` and `y` are the clients' rows (k, m) each (y held, ŷ = y_scale ⊙ y); only the stale
    clients' are stacked."""
    rounds = {c: tuple(p.round for p in state.buffers[c]) for c in names}
    stale = [i for i, c in enumerate(names) if c not in state.forms or state.forms[c].rounds != rounds[c]]
    if stale:
        s_stale = torch.stack([s[i] for i in stale])
        y_stale = backend.stack([y[i] for i in stale])
        yy = stored_gram(backend, [state.buffers[names[i]] for i in stale])
        scale = None if y_scale is None else y_scale[stale]
        if yy is None:  # an older checkpoint: YᵀY of the held rows, in ŷ's units
            yy = gram(backend, y_stale)
            if scale is not None:
                yy = backend.mul(yy, scale.unsqueeze(2) * scale.unsqueeze(1))
        fresh = compact_form(backend, s_stale, y_stale, yy, inverse, scale)
        state.log.inverses += len(stale)
        for row, i in enumerate(stale):
            state.forms[names[i]] = PairCache(
                rounds=rounds[names[i]],
                a=backend.index(fresh.a, row),
                yy=backend.index(fresh.yy, row),
                sigma=backend.index(fresh.sigma, slice(row, row + 1)),
                dkinv=backend.index(fresh.dkinv, row),
            )
    forms = [state.forms[c] for c in names]
    return CompactForm(
        a=backend.stack([f.a for f in forms]),
        yy=backend.stack([f.yy for f in forms]),
        sigma=backend.cat([f.sigma for f in forms]),
        dkinv=backend.stack([f.dkinv for f in forms]),
    )


def stored_gram(backend: Backend, buffers: list[list[CurvaturePair]]) -> Secret | None:
    """YᵀY (n, k, k) assembled from the pairs' stored rows; None if a pair has none (old checkpoint).

    Entry (i, j), i ≤ j, is pair j's row at position len − 1 − (j − i) (its rows end with
    its own ‖ŷ‖², preceded by the pairs it joined, newest last).
    """
    if any(p.yy is None for pairs in buffers for p in pairs):
        return None
    mats = []
    for pairs in buffers:
        k = len(pairs)
        entries = [[None] * k for _ in range(k)]
        for j, pj in enumerate(pairs):
            for i in range(j + 1):
                entry = backend.index(pj.yy, slice(pj.yy.shape[0] - 1 - (j - i), pj.yy.shape[0] - (j - i)))
                entries[i][j] = entries[j][i] = entry
        mats.append(backend.reshape(backend.cat([e for row in entries for e in row]), (k, k)))
    return backend.stack(mats)
