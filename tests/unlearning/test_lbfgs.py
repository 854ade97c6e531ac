"""Compact L-BFGS (unlearning/lbfgs.py) against the dense BFGS recursion, and its safeguards."""

from __future__ import annotations

import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from mpc.plain_backend import PlainBackend
from unlearning.lbfgs import (
    coefficients,
    compact_form,
    correction_kept,
    curvature_accepted,
    gram,
    hessian_vector_product,
    middle_matrix,
    product_square,
    squared_norms,
)


def dense_bfgs(s: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """B_k by the textbook recursion from B_0 = σ_k I, σ_k = y_kᵀs_k / s_kᵀs_k (m×m, tests only)."""
    m, k = s.shape
    sigma = float(y[:, -1] @ s[:, -1]) / float(s[:, -1] @ s[:, -1])
    b = sigma * torch.eye(m, dtype=torch.float64)
    for i in range(k):
        si, yi = s[:, i], y[:, i]
        bs = b @ si
        b = b - torch.outer(bs, bs) / float(si @ bs) + torch.outer(yi, yi) / float(yi @ si)
    return b


def curvature_pairs(seed: int, m: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """k pairs (s, y = A s) of a random SPD quadratic, so every yᵀs > 0."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(m, m, generator=gen, dtype=torch.float64)
    a = q @ q.T / m + 0.5 * torch.eye(m, dtype=torch.float64)
    s = torch.randn(m, k, generator=gen, dtype=torch.float64)
    return s, a @ s


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    m=st.integers(3, 9),
    k=st.integers(1, 3),
    clients=st.integers(1, 3),
    inverse=st.sampled_from(["secmi", "newton"]),
)
def test_compact_product_equals_dense_bfgs(seed: int, m: int, k: int, clients: int, inverse: str) -> None:
    backend = PlainBackend()
    batch = [curvature_pairs(seed + j, m, k) for j in range(clients)]
    v = torch.randn(m, generator=torch.Generator().manual_seed(seed + 99), dtype=torch.float64)
    s = torch.stack([p[0].T for p in batch])  # (n, k, m) rows
    y = backend.share(torch.stack([p[1].T for p in batch]))
    got = backend.reveal(hessian_vector_product(backend, s, y, v, inverse))
    want = torch.stack([dense_bfgs(si, yi) @ v for si, yi in batch])
    assert got.shape == (clients, m)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-8)


def test_middle_matrix_blocks() -> None:
    backend = PlainBackend()
    s, y = curvature_pairs(3, 5, 3)
    kmat, sigma = middle_matrix(backend, (s.T @ s)[None], backend.share((s.T @ y)[None]))
    k = backend.reveal(kmat)[0]
    a = s.T @ y
    sig = float(y[:, 2] @ s[:, 2] / (s[:, 2] @ s[:, 2]))
    assert abs(float(backend.reveal(sigma)[0]) - sig) < 1e-12
    torch.testing.assert_close(k[:3, :3], sig * s.T @ s)
    torch.testing.assert_close(k[:3, 3:], torch.tril(a, -1))
    torch.testing.assert_close(k[3:, :3], torch.tril(a, -1).T)
    torch.testing.assert_close(k[3:, 3:], -torch.diag(torch.diag(a)))


def test_single_pair_reproduces_secant_equation() -> None:
    """With one pair, B s = y exactly (the secant condition of BFGS)."""
    backend = PlainBackend()
    s, y = curvature_pairs(7, 6, 1)
    got = backend.reveal(hessian_vector_product(backend, s.T[None], backend.share(y.T[None]), s[:, 0], "secmi"))[0]
    torch.testing.assert_close(got, y[:, 0])


def test_curvature_bit_rejects_non_positive_pairs() -> None:
    backend = PlainBackend()
    s = torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64)
    y = backend.share(torch.tensor([[0.5, 1.0, 0.0], [-0.5, 2.0, 0.0], [0.0, 3.0, 1.0]], dtype=torch.float64))
    accepted, y2 = curvature_accepted(backend, s, y, eps=1e-6, kappa=1e3)
    torch.testing.assert_close(backend.reveal(y2), torch.tensor([1.25, 4.25, 10.0], dtype=torch.float64))
    assert accepted.tolist() == [True, False, False]


def test_cautious_bound_rejects_nearly_orthogonal_pairs() -> None:
    """‖y‖² ≤ κ·yᵀs: y almost orthogonal to s (SGD noise) would add an eigenvalue ‖y‖²/yᵀs ≫ κ."""
    backend = PlainBackend()
    s = torch.tensor([0.1, 0.0], dtype=torch.float64)
    y = torch.tensor([[0.2, 0.1], [1e-4, 5.0], [0.05, 0.0]], dtype=torch.float64)
    accepted, _ = curvature_accepted(backend, s, backend.share(y), eps=1e-6, kappa=100.0)
    ratios = (y * y).sum(1) / (y @ s)
    assert ratios[0] < 100 < ratios[1] and ratios[2] < 100
    assert accepted.tolist() == [True, False, True]


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), kappa=st.floats(1.0, 1e3))
def test_accepted_pairs_bound_the_bfgs_matrix(seed: int, kappa: float) -> None:
    """Pairs that pass both tests give ‖B_k‖ ≤ (k+1)·κ, whatever the raw pairs were."""
    backend = PlainBackend()
    gen = torch.Generator().manual_seed(seed)
    m, k = 5, 3
    s = torch.randn(m, k, generator=gen, dtype=torch.float64)
    y = torch.randn(m, k, generator=gen, dtype=torch.float64) * torch.rand(k, generator=gen, dtype=torch.float64) * 10
    keep = [
        i for i in range(k) if curvature_accepted(backend, s[:, i], backend.share(y[:, i][None]), 1e-6, kappa)[0][0]
    ]
    assume(keep)
    s_hat = s[:, keep] / s[:, keep].norm(dim=0)
    y_hat = y[:, keep] / s[:, keep].norm(dim=0)
    assert torch.linalg.matrix_norm(dense_bfgs(s_hat, y_hat), ord=2) <= (len(keep) + 1) * kappa * (1 + 1e-9)


def test_squared_norms_and_correction_bit() -> None:
    backend = PlainBackend()
    g = torch.tensor([[3.0, 4.0], [1.0, 0.0]], dtype=torch.float64)
    hv2 = torch.tensor([1.0, 25.0], dtype=torch.float64)  # ‖H·v̂‖² for a unit v̂
    g2 = squared_norms(backend, backend.share(g))
    torch.testing.assert_close(backend.reveal(g2), torch.tensor([25.0, 1.0], dtype=torch.float64))
    for v_norm in (0.1, 8.0):  # both branches of the public rescaling
        bit = backend.reveal(correction_kept(backend, backend.share(hv2), g2, 2.0, v_norm))
        # ‖Hv‖ = ‖v‖·‖H v̂‖: row 0 is ‖v‖·1 vs 2·5, row 1 is ‖v‖·5 vs 2·1
        assert bit.tolist() == [float(v_norm * 1.0 <= 10.0), float(v_norm * 5.0 <= 2.0)]


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), m=st.integers(3, 9), k=st.integers(1, 3), clients=st.integers(1, 3))
def test_gram_square_equals_the_product_norm(seed: int, m: int, k: int, clients: int) -> None:
    """cᵀGc (no m-sized square) is ‖B_k v̂‖² of the dense BFGS matrix."""
    backend = PlainBackend()
    batch = [curvature_pairs(seed + j, m, k) for j in range(clients)]
    v = torch.randn(m, generator=torch.Generator().manual_seed(seed + 7), dtype=torch.float64)
    v_hat = v / v.norm()
    s = torch.stack([p[0].T for p in batch])
    y = backend.share(torch.stack([p[1].T for p in batch]))
    form = compact_form(backend, s, y, gram(backend, y))
    c, yv = coefficients(backend, form, s, y, v_hat)
    got = backend.reveal(product_square(backend, form, s, v_hat, yv, c))
    want = torch.stack([(dense_bfgs(si, yi) @ v_hat).square().sum() for si, yi in batch])
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-8)
