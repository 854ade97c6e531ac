"""SecSP: scalar product (Starfish Appendix B, Table V/VI).

    SecSP([x], y) = [⟨x, y⟩] = Σ_k [x_k]·y_k   along the last dimension (batched over the others)

Local when `y` is public (Algorithm 1 line 5: u_i = ⟨[g_i^t], M_{i−1} − M_i⟩), one SecMul
otherwise (Algorithm 6 line 6: ⟨[g], [g]⟩). This is the portable `Primitives.dot`; the
CrypTen backend specialises it to truncate the sum once instead of every product.
"""

from __future__ import annotations

import torch

from mpc.primitives import Primitives, Secret


def sec_sp(backend: Primitives, x: Secret, y: Secret | torch.Tensor) -> Secret:
    """SecSP: [Σ_k x_k·y_k] over the last dimension (batched over leading dimensions)."""
    return backend.sum(backend.mul(x, y), dim=len(x.shape) - 1)
