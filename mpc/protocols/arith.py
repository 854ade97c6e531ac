"""Arithmetic helpers: SecMul3 and SecSP (Starfish Appendix B, Table V/VI).

* SecMul3([a], [b], [c]) = [a·b·c] — two sequential SecMul calls (used by SecGE3/SecGE4,
  Algorithm 5 line 3, and SecUE, Algorithm 2).
* SecSP([x], y) = [⟨x, y⟩] — scalar product along the last dimension; local when `y` is
  public (Algorithm 1 line 5: u_i = ⟨[g_i^t], M_{i−1} − M_i⟩), one SecMul otherwise
  (Algorithm 6 line 6: ⟨[g], [g]⟩).
"""

from __future__ import annotations

import torch

from mpc.backend import Backend, Public, Secret


def sec_mul3(backend: Backend, a: Secret, b: Secret | Public, c: Secret | Public) -> Secret:
    """SecMul3: [a·b·c] by two SecMul calls."""
    return backend.mul(backend.mul(a, b), c)


def sec_sp(backend: Backend, x: Secret, y: Secret | torch.Tensor) -> Secret:
    """SecSP: [Σ_k x_k·y_k] over the last dimension (batched over leading dimensions)."""
    return backend.sum(backend.mul(x, y), dim=len(x.shape) - 1)
