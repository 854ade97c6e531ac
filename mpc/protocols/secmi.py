"""Inverse of small shared square matrices: SecMI (Algorithm 7) and Newton–Schulz.

"secmi" — Starfish Appendix E, Algorithm 7, used by SecUE (Algorithm 2) for K⁻¹:
    line 1  N = SecRec(SecMul([X], [R]))     R: shared random matrix nobody knows
    line 2  N⁻¹ computed in the clear (float64)
    line 3  [X⁻¹] = SecMul([R], N⁻¹)         (public right operand: local)
  The paper's security argument needs R uniform over invertible matrices of a finite
  field; over fixed-point reals R has Gaussian entries, so N = X·R reveals magnitude
  information about X (e.g. its singular values up to the spread of R). This reveal
  must be listed among what a job discloses. Cost: one batched matrix product + one
  reveal, then s refinements (two batched products each).
  Precision: in fixed point (ulp u, d×d) X̃ = R·Ñ⁻¹ has the residual
      I − K·X̃ = −Ñ·δ + Δ₁·(Ñ⁻¹ + δ) − K·Δ₂,
  Δ₁ the truncation of K·R (entries < 2u), δ the encoding of the public Ñ⁻¹ (≤ u/2),
  Δ₂ the truncation of R·Ñ⁻¹ (< 2u). The mask's part is bounded from the public Ñ alone,
      ‖I − K·X̃‖_F ≤ ρ = u·d·(2‖Ñ⁻¹‖_F + ‖Ñ‖_F/2 + u·d)   (+ 2u·d·‖K‖, the floor of any
  fixed-point inverse), and ρ has a heavy tail: ‖Ñ⁻¹‖ ≥ ‖K⁻¹‖/‖R‖ grows without bound as
  the Gaussian R nears a singular matrix (for the K of a small FedRecover job, one 4×4
  mask in 300 gave ρ > 1/2, and after a single refinement one K⁻¹ in 10³ was still off by
  more than 2·10⁻³ of its largest entry). So
  both parties compute ρ from Ñ and apply s Newton–Schulz refinements
  X ← X·(2I − K·X), the fewest with ρ^(2^s) ≤ u (each squares the residual); if
  ρ ≥ 1/2 (no guaranteed convergence) they run "newton" below instead, which reveals
  nothing more. An Ñ that is singular in float64 (its LU has a zero pivot, or Ñ⁻¹ is not
  finite) has no ρ: it takes the same fallback (ρ = ∞), not an error. In fixed point that
  happens when K̄ has a zero row — K·R then has the same zero row exactly, since the two
  shares ±a of a zero truncate to ∓⌊|a|/2^f⌋ — e.g. an L-BFGS K whose newest curvature
  ŝᵀŷ lies below the grid (unlearning/lbfgs.py keeps it above CURVATURE_FLOOR so that
  this does not arise); a rank-deficient mask would do it too, with probability 0 over
  the reals. Newton–Schulz needs no mask: for an invertible K it converges whatever R
  was. The fallback first scales K by c = 2^j (`unit_scale`: ‖c·K‖_F ≈ 1, read from ‖Ñ‖_F)
  and returns c·(c·K)⁻¹; an integer c multiplies shares exactly. Without it a small K
  (entries of 10⁻³, from pairs of small curvature) defeats Newton–Schulz in fixed point:
  its squares ‖K‖_F² vanish below the grid and X_0 = Kᵀ/‖K‖_F² is garbage. A small K is
  also where ρ ≥ 1/2 is common (ρ grows with ‖Ñ⁻¹‖ ∝ 1/‖K‖): 18 % of masks for the
  entries of 10⁻² of a small Starfish job, 90 % at the curvature floor. Both decisions
  and c depend only on the opened Ñ, so the parties stay in step and nothing more is revealed.

"newton" — Newton–Schulz iteration, nothing revealed:
    X_0 = Kᵀ / ‖K‖_F²   (converges since ‖K‖₂² ≤ ‖K‖_F²)
    X_{t+1} = X_t·(2I − K·X_t)
  The error e_t = ‖I − K X_t‖ squares every step from e_0 ≤ 1 − 1/(d·κ²), so about
  log₂(d·κ²) + 5 iterations reach fixed-point precision; κ is the condition number and
  `iterations` must be chosen for the documented κ (docs/NUMERICS.md). Cost per
  iteration: two batched shared matrix products; plus one SecDiv for 1/‖K‖_F².
"""

from __future__ import annotations

import math

import torch

from mpc.primitives import Primitives, Secret

NEWTON_ITERATIONS_DEFAULT = 30
"""Newton–Schulz steps: enough for d ≤ 8 and κ ≤ 10³ (log₂(8·10⁶) + 5 ≈ 28)."""
UNIT_SCALE_EXPONENT_MAX = 16
"""Largest j of the public factor 2^j that brings K to unit norm before the Newton–Schulz
fallback (2^16: a K of one ulp at f = 16)."""
MASK_RESIDUAL_MAX = 0.5
"""Largest bound ρ that SecMI refines from (ρ^16 ≤ 2^-16 = u at f = 16: at most 4 steps);
at or above it the mask is too ill-conditioned and "newton" runs instead."""


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
    """Algorithm 7 lines 1–3, then s refinements; Newton–Schulz for an Ñ it cannot refine from."""
    r = backend.random(tuple(k.shape))
    n_open = backend.reveal(backend.matmul(k, r))
    n_inv = invertible_inverse(n_open)
    rho = math.inf if n_inv is None else mask_residual_bound(n_open, n_inv, backend.resolution)
    if n_inv is None or rho >= MASK_RESIDUAL_MAX:
        scale = unit_scale(n_open)  # K⁻¹ = c·(c·K)⁻¹, both products exact (c an integer)
        return backend.mul(_newton_schulz(backend, backend.mul(k, scale), NEWTON_ITERATIONS_DEFAULT), scale)
    return refine(backend, k, backend.matmul(r, n_inv), refinements(rho, backend.resolution))


def unit_scale(n_open: torch.Tensor) -> torch.Tensor:
    """c = 2^j (..., 1, 1) per matrix with ‖c·K‖_F ≈ 1, from the opened Ñ alone: E‖K·R‖_F² =
    d·‖K‖_F² for R of N(0, 1) entries, so j = round(log₂(√d/‖Ñ‖_F)), clamped to
    [0, UNIT_SCALE_EXPONENT_MAX] (only scaled up: an integer c multiplies shares exactly)."""
    d = n_open.shape[-1]
    norm = torch.linalg.matrix_norm(n_open).clamp(min=math.sqrt(d) * 2.0**-UNIT_SCALE_EXPONENT_MAX)
    exponent = torch.round(torch.log2(math.sqrt(d) / norm)).clamp(0, UNIT_SCALE_EXPONENT_MAX)
    return torch.pow(2.0, exponent)[..., None, None]


def invertible_inverse(n_open: torch.Tensor) -> torch.Tensor | None:
    """Ñ⁻¹ of every matrix of the opened batch in float64, or None if one of them is singular
    (a zero pivot) or its inverse is not finite: a public fact of Ñ, the same on both parties."""
    n_inv, info = torch.linalg.inv_ex(n_open)
    if bool((info != 0).any()) or not bool(torch.isfinite(n_inv).all()):
        return None
    return n_inv


def mask_residual_bound(n_open: torch.Tensor, n_inv: torch.Tensor, ulp: float) -> float:
    """ρ = u·d·(2‖Ñ⁻¹‖_F + ‖Ñ‖_F/2 + u·d), the largest over the batch: a bound on the mask's
    part of ‖I − K·R·Ñ⁻¹‖_F in fixed point with ulp u (module docstring); 0 when u = 0."""
    d = n_open.shape[-1]
    norm = torch.linalg.matrix_norm
    bound = ulp * d * (2.0 * norm(n_inv) + norm(n_open) / 2.0 + ulp * d)
    return float(bound.max()) if bound.numel() else 0.0


def refinements(rho: float, ulp: float) -> int:
    """s, the fewest Newton–Schulz steps with ρ^(2^s) ≤ u (each step squares the residual)."""
    if not 0.0 <= rho < 1.0:
        raise ValueError(f"refinement converges from a residual bound in [0, 1), got {rho!r}")
    steps = 0
    while rho > ulp:
        rho, steps = rho * rho, steps + 1
    return steps


def refine(backend: Primitives, k: Secret, x: Secret, steps: int) -> Secret:
    """`steps` Newton–Schulz steps X ← X·(2I − K·X): each squares the residual I − K·X."""
    two_eye = 2.0 * torch.eye(k.shape[-1], dtype=torch.float64)
    for _ in range(steps):
        x = backend.matmul(x, backend.neg(backend.sub(backend.matmul(k, x), two_eye)))
    return x


def _newton_schulz(backend: Primitives, k: Secret, iterations: int) -> Secret:
    if iterations < 1:
        raise ValueError("Newton–Schulz needs at least one iteration")
    nd = len(k.shape)
    k_t = backend.transpose(k, nd - 2, nd - 1)
    fro2 = backend.sum(backend.sum(backend.mul(k, k), dim=nd - 1), dim=nd - 2)
    x = backend.div(k_t, backend.reshape(fro2, tuple(k.shape[:-2]) + (1, 1)))
    return refine(backend, k, x, iterations)
