"""Compact L-BFGS Hessian–vector product over any `Backend` (Starfish SecUE, Algorithm 2).

The paper's Equation 3 keeps an m×m inverse-Hessian approximation, infeasible for a model
of m parameters. We use the compact representation of Byrd, Nocedal and Schnabel (1994,
Theorem 2.3), as FedRecover's implementation does: with k curvature pairs
S = [s_1 … s_k] (model differences, PUBLIC) and Y = [y_1 … y_k] (gradient differences,
SECRET), the BFGS matrix started from B_0 = σ_k·I is

    B_k = σ_k I − [σ_k S, Y] · K⁻¹ · [σ_k Sᵀ ; Yᵀ],
    K   = [[σ_k SᵀS, L], [Lᵀ, −D]]   (2k × 2k),
    A   = SᵀY,  D = diag(A),  L = strictly-lower(A),  σ_k = (y_kᵀ s_k)/(s_kᵀ s_k),

so B_k·v = σ_k v − [σ_k S, Y]·q with p = [σ_k Sᵀv ; Yᵀv] and q = K⁻¹·p. Nothing of size
m×m is formed; the only secret×secret products are K⁻¹ (SecMI or Newton–Schulz), K⁻¹·p,
σ_k·(v − S q₁) and Y·q₂. Every function is batched over a leading client dimension n.

The curvature safeguards (docs/ALGORITHM.md §3, "safeguards") are here too so both backends apply the
same rule: a pair is kept only if yᵀs ≥ ε·sᵀs and ‖y‖² ≤ κ·yᵀs (one revealed bit per client
and pair), and a correction with ‖Hv‖ > c·‖g‖ is dropped obliviously (nothing revealed).
"""

from __future__ import annotations

import torch

from mpc.backend import Backend, Secret


def middle_matrix(backend: Backend, s: torch.Tensor, y: Secret) -> tuple[Secret, Secret]:
    """K = [[σ_k SᵀS, L], [Lᵀ, −D]] and σ_k for a batch: s (n, m, k) public, y (n, m, k) secret.

    A = SᵀY is local (public left operand); σ_k = A[k,k] / (s_kᵀ s_k) is local (public
    denominator). Returns (K of shape (n, 2k, 2k), σ of shape (n,)).
    """
    n, _, k = s.shape
    st = s.transpose(1, 2)
    a = backend.matmul(st, y)  # (n, k, k) = SᵀY
    ss = torch.matmul(st, s)  # (n, k, k) public
    sigma = backend.mul(backend.index(a, (slice(None), k - 1, k - 1)), 1.0 / ss[:, k - 1, k - 1])
    lower = backend.mul(a, torch.tril(torch.ones(k, k, dtype=torch.float64), diagonal=-1))
    diag = backend.mul(a, torch.eye(k, dtype=torch.float64))
    top_left = backend.mul(backend.reshape(sigma, (n, 1, 1)), ss)
    top = backend.cat([top_left, lower], dim=2)
    bottom = backend.cat([backend.transpose(lower, 1, 2), backend.neg(diag)], dim=2)
    return backend.cat([top, bottom], dim=1), sigma


def refined_inverse(backend: Backend, kmat: Secret, inverse: str, steps: int = 1) -> Secret:
    """[K⁻¹] by `Backend.inverse`, then `steps` Newton–Schulz refinements X ← X·(2I − K·X).

    SecMI's K⁻¹ = R·N⁻¹ inherits the conditioning of the random mask R: an ill-conditioned
    N = K·R amplifies the fixed-point error of N. One refinement squares the residual
    I − K·X (two 2B×2B secret products per client), removing that amplification.
    """
    x = backend.inverse(kmat, inverse)
    two_eye = 2.0 * torch.eye(kmat.shape[-1], dtype=torch.float64)
    for _ in range(steps):
        x = backend.matmul(x, backend.neg(backend.sub(backend.matmul(kmat, x), two_eye)))
    return x


def hessian_vector_product(
    backend: Backend, s: torch.Tensor, y: Secret, v: torch.Tensor, inverse: str = "secmi"
) -> Secret:
    """B_k·v by the compact form (module docstring) for every client of the batch.

    s: (n, m, k) public pairs; y: (n, m, k) secret pairs; v: (m,) public direction.
    Returns a secret (n, m). `inverse` selects SecMI ("secmi") or Newton–Schulz ("newton").
    """
    n, m, k = s.shape
    v = v.to(torch.float64)
    kmat, sigma = middle_matrix(backend, s, y)
    sigma_col = backend.reshape(sigma, (n, 1))
    sv = torch.matmul(s.transpose(1, 2), v)  # (n, k) public Sᵀv
    p_top = backend.mul(sigma_col, sv)  # σ_k Sᵀv (local)
    p_bottom = backend.matmul(backend.transpose(y, 1, 2), v)  # Yᵀv (local)
    p = backend.reshape(backend.cat([p_top, p_bottom], dim=1), (n, 2 * k, 1))
    q = backend.matmul(refined_inverse(backend, kmat, inverse), p)  # q = K⁻¹ p
    q1 = backend.index(q, (slice(None), slice(0, k)))
    q2 = backend.index(q, (slice(None), slice(k, 2 * k)))
    # σ_k (v − S q₁) = σ_k v − S (σ_k q₁): the only secret product is the small σ_k·q₁, the
    # two m-sized terms are products with the public v and S (local)
    sigma_q1 = backend.mul(backend.reshape(sigma, (n, 1, 1)), q1)  # (n, k, 1)
    s_sigma_q1 = backend.reshape(backend.matmul(s, sigma_q1), (n, m))  # S (σ_k q₁) (local)
    first = backend.sub(backend.mul(sigma_col, v), s_sigma_q1)  # σ_k v − S (σ_k q₁)
    y_q2 = backend.reshape(backend.matmul(y, q2), (n, m))  # Y q₂
    return backend.sub(first, y_q2)


def squared_norms(backend: Backend, x: Secret) -> Secret:
    """‖x_j‖² per row of a secret (n, m), as batched dot products (one truncation each)."""
    n, m = x.shape
    return backend.reshape(backend.matmul(backend.reshape(x, (n, 1, m)), backend.reshape(x, (n, m, 1))), (n,))


def curvature_accepted(backend: Backend, s: torch.Tensor, y: Secret, eps: float, kappa: float) -> torch.Tensor:
    """Safeguard 1: reveal, per client, whether the new pair (s, y) may enter its buffer.

    Accepted iff yᵀs ≥ ε·sᵀs (positive curvature) AND ‖y‖² ≤ κ·yᵀs (the "cautious" bound
    of Li and Fukushima: every rank-one term y yᵀ/(yᵀs) of the BFGS update has norm ≤ κ, so
    σ_k ≤ κ, ‖B_k‖ ≤ (k+1)·κ and ‖ŷ‖ = ‖y‖/‖s‖ ≤ κ — bounded fixed-point magnitudes).
    s: (m,) public (the same model difference for every client), y: (n, m) secret, raw
    (not normalised, so ‖y‖² stays at gradient scale). yᵀs is local; ‖y‖² is one batched
    dot product. Returns a public bool tensor (n,); only the combined bit is revealed.
    """
    s = s.to(torch.float64)
    curvature = backend.matmul(y, s)  # (n,) yᵀs, local
    positive = backend.ge(curvature, float(eps) * float(torch.dot(s, s)))
    cautious = backend.ge(backend.mul(curvature, float(kappa)), squared_norms(backend, y))
    return backend.reveal(backend.mul(positive, cautious)) > 0.5


def bounded_correction(
    backend: Backend, hv_unit: Secret, g: Secret, bound: float, v_norm: float, g_norms: Secret | None = None
) -> Secret:
    """Safeguard 2: H v̂ where ‖H v‖ = ‖v‖·‖H v̂‖ ≤ c·‖g‖, else 0 — an oblivious drop (nothing revealed).

    `hv_unit` is H·v̂ for the unit direction v̂ = v/‖v‖. Squared norms are compared
    ([(c/‖v‖)²‖g‖² ≥ ‖H v̂‖²], no square root); the public factor is applied to whichever
    side it shrinks, so no fixed-point magnitude grows. Returns the kept H v̂ (n, m).
    """
    n = hv_unit.shape[0]
    factor = (float(bound) / float(v_norm)) ** 2
    # ‖g‖² from the client-reported norms when given (one scalar product per client instead
    # of two m-sized openings), else as a batched dot product
    g2 = squared_norms(backend, g) if g_norms is None else backend.square(g_norms)
    hv2 = squared_norms(backend, hv_unit)
    if factor <= 1.0:
        ok = backend.ge(backend.mul(g2, factor), hv2)
    else:
        ok = backend.ge(g2, backend.mul(hv2, 1.0 / factor))
    return backend.mul(hv_unit, backend.reshape(ok, (n, 1)))  # the bit broadcast over the row
