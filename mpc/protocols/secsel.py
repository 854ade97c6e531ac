"""SecSel (Starfish Appendix B, Table VI: one call of SecMul).

    [r] = [b] + [bit]·([a] − [b])   — a where bit = 1, b where bit = 0.

`bit` must be a shared 0/1 value produced by a comparison (SecGE and friends). On the
CrypTen backend a comparison bit is an integer (scale 1) sharing, so the product is
exact: the selected value is bit-for-bit one of the inputs, never a truncated copy.
"""

from __future__ import annotations

import torch

from mpc.primitives import Primitives, Public, Secret


def sec_sel(backend: Primitives, bit: Secret, a: Secret | Public, b: Secret | Public) -> Secret:
    """SecSel: bit·a + (1 − bit)·b with one multiplication by the shared bit."""
    if isinstance(a, Secret):
        diff: Secret | Public = backend.sub(a, b)
    elif isinstance(b, Secret):
        diff = backend.neg(backend.sub(b, a))
    else:
        diff = torch.as_tensor(a, dtype=torch.float64) - torch.as_tensor(b, dtype=torch.float64)
    chosen = backend.mul(bit, diff)
    return backend.add(chosen, b)
