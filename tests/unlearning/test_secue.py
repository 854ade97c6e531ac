"""SecUE's per-buffer-state cache (unlearning/starfish/secue.py) against the dense BFGS product."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_lbfgs import dense_bfgs

from mpc.plain_backend import PlainBackend
from unlearning.baselines.fedrecover import PairState
from unlearning.starfish.params import StarfishParams
from unlearning.starfish.secue import add_pairs, estimate_gradients, stored_gram

M, CLIENTS = 6, 3


def quadratic(seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(M, M, generator=gen, dtype=torch.float64)
    return q @ q.T / M + 0.5 * torch.eye(M, dtype=torch.float64)


def fill(backend: PlainBackend, store: PairState, params: StarfishParams, steps: int, seed: int) -> list[torch.Tensor]:
    """Offer `steps` pairs (s, y = A_j s) of client j's quadratic A_j to every client."""
    gen = torch.Generator().manual_seed(seed)
    hessians = [quadratic(seed + j) for j in range(CLIENTS)]
    names = [f"c{j}" for j in range(CLIENTS)]
    for t in range(1, steps + 1):
        s = torch.randn(M, generator=gen, dtype=torch.float64)
        exact = backend.share(torch.stack([a @ s for a in hessians]))
        add_pairs(backend, store, names, t, s, exact, backend.zeros((CLIENTS, M)), params)
    return hessians


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), buffer=st.integers(1, 3), steps=st.integers(1, 5))
def test_gram_rows_stored_on_entry_equal_the_buffer_gram(seed: int, buffer: int, steps: int) -> None:
    backend = PlainBackend()
    store = PairState()
    fill(backend, store, StarfishParams(buffer_size=buffer), steps, seed)
    buffers = [store.buffers[f"c{j}"] for j in range(CLIENTS)]
    got = backend.reveal(stored_gram(backend, buffers))
    y = torch.stack([torch.stack([backend.reveal(p.y) for p in pairs]) for pairs in buffers])
    torch.testing.assert_close(got, y @ y.transpose(1, 2))


def test_estimates_match_dense_bfgs_and_reuse_the_form() -> None:
    backend = PlainBackend()
    store = PairState()
    params = StarfishParams(buffer_size=2, hv_bound=1e6)
    fill(backend, store, params, 3, seed=5)
    names = [f"c{j}" for j in range(CLIENTS)]
    g = torch.randn(CLIENTS, M, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    for round_seed in (2, 3):  # two rounds on the same buffers: one inverse per client in all
        v = torch.randn(M, generator=torch.Generator().manual_seed(round_seed), dtype=torch.float64)
        got = backend.reveal(estimate_gradients(backend, store, names, backend.share(g), v, params))
        for j, c in enumerate(names):
            s = torch.stack([p.s for p in store.buffers[c]], dim=1)
            y = torch.stack([backend.reveal(p.y) for p in store.buffers[c]], dim=1)
            torch.testing.assert_close(got[j], g[j] + dense_bfgs(s, y) @ v)
    assert store.log.inverses == CLIENTS


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
