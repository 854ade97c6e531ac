"""SecUE's per-buffer-state cache (unlearning/starfish/secue.py) against the dense BFGS product."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_lbfgs import dense_bfgs

from mpc.plain_backend import PlainBackend
from unlearning.starfish.params import StarfishParams
from unlearning.starfish.run_log import StarfishLog
from unlearning.starfish.secue import add_pairs, estimate_gradients, estimate_update, stored_gram
from unlearning.starfish.state import CurvaturePair, PairCache

M, CLIENTS = 6, 3


@dataclasses.dataclass
class PairState:
    """The least `PairStore` SecUE works on: the clients' buffers, cached forms and a log."""

    buffers: dict[str, list[CurvaturePair]] = dataclasses.field(default_factory=dict)
    forms: dict[str, PairCache] = dataclasses.field(default_factory=dict)
    log: StarfishLog = dataclasses.field(default_factory=StarfishLog)


def y_hat(backend: PlainBackend, pair: CurvaturePair) -> torch.Tensor:
    """The pair's ŷ: its held rows times their public scale."""
    return pair.scale * backend.reveal(pair.y)


def quadratic(seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(M, M, generator=gen, dtype=torch.float64)
    return q @ q.T / M + 0.5 * torch.eye(M, dtype=torch.float64)


def fill(
    backend: PlainBackend,
    store: PairState,
    params: StarfishParams,
    steps: int,
    seed: int,
    lengths: tuple[float, ...] = (),
) -> list[torch.Tensor]:
    """Offer `steps` pairs (s, y = A_j s) of client j's quadratic A_j to every client; step t
    has ‖s‖ = lengths[t − 1] (cycled; a short step holds raw rows with a scale) when given."""
    gen = torch.Generator().manual_seed(seed)
    hessians = [quadratic(seed + j) for j in range(CLIENTS)]
    names = [f"c{j}" for j in range(CLIENTS)]
    for t in range(1, steps + 1):
        s = torch.randn(M, generator=gen, dtype=torch.float64)
        if lengths:
            s = s * (lengths[(t - 1) % len(lengths)] / float(s.norm()))
        exact = backend.share(torch.stack([a @ s for a in hessians]))
        add_pairs(backend, store, names, t, s, exact, backend.zeros((CLIENTS, M)), params)
    return hessians


STEP_LENGTHS = st.lists(st.sampled_from([0.05, 0.3, 1.0, 4.0]), max_size=3).map(tuple)
"""‖s‖ of the offered steps (empty: random, ‖s‖ ≈ √M): short ones hold raw rows with a scale."""


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), buffer=st.integers(1, 3), steps=st.integers(1, 5), lengths=STEP_LENGTHS)
def test_gram_rows_stored_on_entry_equal_the_buffer_gram(
    seed: int, buffer: int, steps: int, lengths: tuple[float, ...]
) -> None:
    backend = PlainBackend()
    store = PairState()
    fill(backend, store, StarfishParams(buffer_size=buffer), steps, seed, lengths)
    buffers = [store.buffers[f"c{j}"] for j in range(CLIENTS)]
    got = backend.reveal(stored_gram(backend, buffers))
    y = torch.stack([torch.stack([y_hat(backend, p) for p in pairs]) for pairs in buffers])
    torch.testing.assert_close(got, y @ y.transpose(1, 2))


@pytest.mark.parametrize("lengths", [(), (0.3, 2.0, 0.05)])
def test_estimates_match_dense_bfgs_and_reuse_the_form(lengths: tuple[float, ...]) -> None:
    """Whatever the step lengths (pairs held normalised, or raw with a scale, in one buffer)."""
    backend = PlainBackend()
    store = PairState()
    params = StarfishParams(buffer_size=2, hv_bound=1e6)
    fill(backend, store, params, 3, seed=5, lengths=lengths)
    assert any(p.scale != 1.0 for pairs in store.buffers.values() for p in pairs) == bool(lengths)
    names = [f"c{j}" for j in range(CLIENTS)]
    g = torch.randn(CLIENTS, M, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    for round_seed in (2, 3):  # two rounds on the same buffers: one inverse per client in all
        v = torch.randn(M, generator=torch.Generator().manual_seed(round_seed), dtype=torch.float64)
        got = backend.reveal(estimate_gradients(backend, store, names, backend.share(g), v, params))
        for j, c in enumerate(names):
            s = torch.stack([p.s for p in store.buffers[c]], dim=1)
            y = torch.stack([y_hat(backend, p) for p in store.buffers[c]], dim=1)
            torch.testing.assert_close(got[j], g[j] + dense_bfgs(s, y) @ v)
    assert store.log.inverses == CLIENTS


def uneven_buffers(
    backend: PlainBackend, store: PairState, params: StarfishParams, seed: int, takers: list[bool]
) -> None:
    """After `fill`, one more pair for the clients marked in `takers` (buffers of two lengths
    when the buffer is not full; c3 holds no pair)."""
    names = [f"c{j}" for j in range(CLIENTS) if takers[j]]
    s = torch.randn(M, generator=torch.Generator().manual_seed(seed + 99), dtype=torch.float64)
    exact = backend.share(torch.stack([quadratic(seed + j) @ s for j in range(CLIENTS) if takers[j]] or [s]))
    if names:
        add_pairs(backend, store, names, 9, s, exact, backend.zeros((len(names), M)), params)


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    buffer=st.integers(1, 3),
    steps=st.integers(0, 3),
    takers=st.lists(st.booleans(), min_size=CLIENTS, max_size=CLIENTS),
    weights=st.lists(st.floats(0.001, 1.0), min_size=CLIENTS + 1, max_size=CLIENTS + 1),
    bound=st.sampled_from([1e6, 0.3]),
    lengths=STEP_LENGTHS,
)
def test_the_update_is_the_weighted_sum_of_the_estimates(
    seed: int,
    buffer: int,
    steps: int,
    takers: list[bool],
    weights: list[float],
    bound: float,
    lengths: tuple[float, ...],
) -> None:
    """estimate_update = Σ_j ω_j·estimate_gradients_j, whatever the buffer lengths (groups, a
    client without pairs), the weights and the ‖Hv‖ bound (some corrections dropped)."""
    backend = PlainBackend()
    store = PairState()
    params = StarfishParams(buffer_size=buffer, hv_bound=bound)
    fill(backend, store, params, steps, seed, lengths)
    uneven_buffers(backend, store, params, seed, takers)
    names = [f"c{j}" for j in range(CLIENTS + 1)]
    gen = torch.Generator().manual_seed(seed + 1)
    g = backend.share(torch.randn(CLIENTS + 1, M, generator=gen, dtype=torch.float64))
    v = torch.randn(M, generator=gen, dtype=torch.float64)
    rows = backend.reveal(estimate_gradients(backend, store, names, g, v, params))
    got = backend.reveal(estimate_update(backend, store, names, g, v, params, weights))
    torch.testing.assert_close(got, torch.tensor(weights, dtype=torch.float64) @ rows)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), scale=st.floats(1.5, 20.0), noise=st.floats(0.0, 3.0), kappa=st.floats(1.0, 8.0))
def test_a_pair_enters_alike_whatever_its_step_length(seed: int, scale: float, noise: float, kappa: float) -> None:
    """(s, y) and (s/λ, y/λ) are the same normalised pair: the step of norm ≥ 1 takes the
    curvature test on (ŝ, ŷ) and holds ŷ, the short one takes it on the raw y and holds y
    with the scale 1/‖s‖; both keep the same pairs with the same ŷ and ‖ŷ‖²."""
    backend = PlainBackend()
    params = StarfishParams(buffer_size=2, curvature_max=kappa)
    gen = torch.Generator().manual_seed(seed)
    s = torch.randn(M, generator=gen, dtype=torch.float64)
    s = s * (scale / float(s.norm()))  # ‖s‖ = scale ≥ 1.5
    # some rows pass the test, some not (negative curvature, or ‖y‖² > κ·yᵀs)
    y = torch.stack([quadratic(seed + j) @ s for j in range(CLIENTS)])
    y = y + noise * float(s.norm()) * torch.randn(CLIENTS, M, generator=gen, dtype=torch.float64)
    names = [f"c{j}" for j in range(CLIENTS)]
    kept = []
    for step in (1.0, 2.0 * scale):  # ‖s‖ ≥ 1, then ‖s‖ = 0.5
        store = PairState()
        add_pairs(backend, store, names, 1, s / step, backend.share(y / step), backend.zeros((CLIENTS, M)), params)
        pairs = {c: store.buffers[c][0] for c in names if c in store.buffers}
        kept.append({c: (y_hat(backend, p), backend.reveal(p.yy)) for c, p in pairs.items()})
        assert [e.accepted for e in store.log.curvature] == [c in pairs for c in names]
    assert kept[0].keys() == kept[1].keys()
    for c, (normalised, yy) in kept[0].items():
        torch.testing.assert_close(normalised, kept[1][c][0])
        torch.testing.assert_close(yy, kept[1][c][1])


def test_dropped_correction_keeps_the_stored_gradient() -> None:
    """‖Hv‖ > c·‖g‖: the bit folded into the coefficients zeroes the whole correction."""
    backend = PlainBackend()
    store = PairState()
    params = StarfishParams(buffer_size=2, hv_bound=1e-6)
    fill(backend, store, params, 2, seed=9)
    g = torch.ones(CLIENTS, M, dtype=torch.float64)
    v = torch.ones(M, dtype=torch.float64)
    got = backend.reveal(
        estimate_gradients(backend, store, [f"c{j}" for j in range(CLIENTS)], backend.share(g), v, params)
    )
    torch.testing.assert_close(got, g)


class SessionBackend(PlainBackend):
    """The plaintext backend with sessions: a fixed handle is valid only in the session that
    made it (like the CrypTen backend's), and every operand fixed is counted."""

    def __init__(self) -> None:
        super().__init__()
        self.session, self.fixed_count = 0, 0
        self.made: dict[int, int] = {}

    def fix(self, items):
        handles = super().fix(items)
        self.fixed_count += len(handles)
        self.made.update({id(h): self.session for h in handles})
        return handles

    def fixed_current(self, fixed) -> bool:
        return self.made.get(id(fixed)) == self.session


def test_pairs_are_fixed_once_per_session_and_again_after_a_new_session() -> None:
    """Pairs are fixed on entry; rounds reuse the handles; a new session (or handles lost with
    a checkpoint) fixes every pair again, with the same estimates."""
    backend = SessionBackend()
    store = PairState()
    params = StarfishParams(buffer_size=2, hv_bound=1e6)
    fill(backend, store, params, 3, seed=7)
    names = [f"c{j}" for j in range(CLIENTS)]
    assert backend.fixed_count == 3 * CLIENTS  # every accepted pair, once, when it entered
    g = backend.share(torch.randn(CLIENTS, M, generator=torch.Generator().manual_seed(2), dtype=torch.float64))
    v = torch.randn(M, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    first = backend.reveal(estimate_gradients(backend, store, names, g, v, params))
    second = backend.reveal(estimate_gradients(backend, store, names, g, v, params))
    assert backend.fixed_count == 3 * CLIENTS and torch.equal(first, second)
    backend.session += 1  # a new session: every held handle is stale
    resumed = backend.reveal(estimate_gradients(backend, store, names, g, v, params))
    assert backend.fixed_count == 3 * CLIENTS + 2 * CLIENTS and torch.equal(resumed, first)
    for pairs in store.buffers.values():  # handles are not part of a checkpoint
        pairs[:] = [dataclasses.replace(p, fixed=None) for p in pairs]
    assert backend.reveal(estimate_gradients(backend, store, names, g, v, params)).equal(first)
    assert backend.fixed_count == 3 * CLIENTS + 4 * CLIENTS
    # a pair entering in a new session: the pair it joins is fixed again for its YᵀY entry
    backend.session += 1
    before = backend.fixed_count
    s = torch.randn(M, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    exact = backend.share(torch.stack([s] * CLIENTS))  # y = s: positive curvature
    add_pairs(backend, store, names, 4, s, exact, backend.zeros((CLIENTS, M)), params)
    assert backend.fixed_count == before + 2 * CLIENTS
    buffers = [store.buffers[c] for c in names]
    y = torch.stack([torch.stack([y_hat(backend, p) for p in pairs]) for pairs in buffers])
    torch.testing.assert_close(backend.reveal(stored_gram(backend, buffers)), y @ y.transpose(1, 2))
