"""Inverse of small shared square matrices: SecMI (Algorithm 7) and Newton–Schulz.

"secmi" — Starfish Appendix E, Algorithm 7, used by SecUE (Algorithm 2) for K⁻¹:
    line 1  N = SecRec(SecMul([X], [R]))     R: shared random matrix nobody knows
    line 2  N⁻¹ computed in the clear (float64)
    line 3  [X⁻¹] = SecMul([R], N⁻¹)         (public right operand: local)
  The paper's security argument needs R uniform over invertible matrices of a finite
  field; over fixed-point reals R has Gaussian entries, so N = X·R reveals magnitude
  information about X (e.g. its singular values up to the spread of R). This reveal
  must be listed among what a job discloses. Cost: one batched matrix product + one
  reveal.

"newton" — Newton–Schulz iteration, nothing revealed:
    X_0 = Kᵀ / ‖K‖_F²   (converges since ‖K‖₂² ≤ ‖K‖_F²)
    X_{t+1} = X_t·(2I − K·X_t)
  The error e_t = ‖I − K X_t‖ squares every step from e_0 ≤ 1 − 1/(d·κ²), so about
  log₂(d·κ²) + 5 iterations reach fixed-point precision; κ is the condition number and
  `iterations` must be chosen for the documented κ (docs/NUMERICS.md). Cost per
  iteration: two batched shared matrix products; plus one SecDiv for 1/‖K‖_F².
"""

from __future__ import annotations

import torch

from mpc.primitives import Primitives, Secret

NEWTON_ITERATIONS_DEFAULT = 30
"""Newton–Schulz steps: enough for d ≤ 8 and κ ≤ 10³ (log₂(8·10⁶) + 5 ≈ 28)."""


class SingularMaskedMatrix(ArithmeticError):
    """N = K·R was singular in the clear (K singular, or a degenerate random R)."""


def sec_inverse(
    backend: Primitives, k: Secret, method: str = "secmi", iterations: int = NEWTON_ITERATIONS_DEFAULT
) -> Secret:
    """[K⁻¹] for a batch of shared square matrices K of shape (..., d, d)."""
    if len(k.shape) < 2 or k.shape[-1] != k.shape[-2]:
        raise ValueError(f"expected square matrices (..., d, d), got shape {tuple(k.shape)}")
    if method == "secmi":
        return _secmi(backend, k)
    if method == "newton":
        return _newton_schulz(backend, k, iterations)
    raise ValueError(f"unknown inverse method {method!r}; choose 'secmi' or 'newton'")


def _secmi(backend: Primitives, k: Secret) -> Secret:
    r = backend.random(tuple(k.shape))
    n_open = backend.reveal(backend.matmul(k, r))
    try:
        n_inv = torch.linalg.inv(n_open)
    except RuntimeError as exc:  # torch raises on exactly singular input
        raise SingularMaskedMatrix("masked matrix N = K·R is singular; K is not invertible") from exc
    if not torch.isfinite(n_inv).all():
        raise SingularMaskedMatrix("masked matrix N = K·R is numerically singular")
    return backend.matmul(r, n_inv)


def _newton_schulz(backend: Primitives, k: Secret, iterations: int) -> Secret:
    if iterations < 1:
        raise ValueError("Newton–Schulz needs at least one iteration")
    d = k.shape[-1]
    nd = len(k.shape)
    k_t = backend.transpose(k, nd - 2, nd - 1)
    fro2 = backend.sum(backend.sum(backend.mul(k, k), dim=nd - 1), dim=nd - 2)
    x = backend.div(k_t, backend.reshape(fro2, tuple(k.shape[:-2]) + (1, 1)))
    two_eye = 2.0 * torch.eye(d, dtype=torch.float64)
    for _ in range(iterations):
        kx = backend.matmul(k, x)
        x = backend.matmul(x, backend.neg(backend.sub(kx, two_eye)))
    return x
