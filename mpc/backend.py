"""The backend interface: what the unlearning algorithms may do with secret values.

`unlearning/` is written once against `Backend` and runs on two implementations:

* `mpc.plain_backend.PlainBackend` — values are float64 torch tensors (reference,
  fast sweeps, ground truth for the secure run);
* `mpc.crypten_backend.CrypTenBackend` — values are CrypTen arithmetic shares held
  by two parties with a dealer (TTP) providing correlated randomness.

`Backend` is `mpc.primitives.Primitives` (the operations each backend implements, see
there) with the composite protocols of `mpc/protocols/` bound as methods: SecGE2/3/4,
SecSel, SecMax, SecSrt, SecTop, SecMI, SecTC, SecMul3, SecSP, SecClip. Both backends therefore run the same
network of comparisons and agree exactly on orders, selections and flags. The layering
has no loop: primitives ← protocols ← backend ← plain_backend, crypten_backend.
"""

from __future__ import annotations

import torch

from mpc.primitives import Fixed, Prepared, Primitives, Public, Secret
from mpc.protocols.secclip import sec_clip
from mpc.protocols.secge import ge_of_products, sec_ge2, sec_ge3, sec_ge4
from mpc.protocols.secmax import sec_max
from mpc.protocols.secmi import NEWTON_ITERATIONS_DEFAULT, sec_inverse
from mpc.protocols.secmul3 import sec_mul3
from mpc.protocols.secsel import sec_sel
from mpc.protocols.secsp import sec_sp
from mpc.protocols.secsrt import sec_sort_desc
from mpc.protocols.sectc import sec_tc
from mpc.protocols.sectop import sec_top_set

__all__ = ["Backend", "Fixed", "Prepared", "Public", "Secret"]


class Backend(Primitives):
    """The primitives of a backend plus the composite protocols (module docstring)."""

    # ----------------------------------------------------------------- specialisable primitives
    def ge_prod(self, a: Secret, b: Secret | Public, c: Secret | Public, d: Secret | Public) -> Secret:
        """Shared bit [a·b ≥ c·d]: SecGE(SecMul(a, b), SecMul(c, d)) unless the backend specialises it."""
        return ge_of_products(self, a, b, c, d)

    def select(self, bit: Secret, a: Secret | Public, b: Secret | Public) -> Secret:
        """SecSel: bit·a + (1 − bit)·b, i.e. a where bit = 1 else b (`protocols/secsel.py`)."""
        return sec_sel(self, bit, a, b)

    def dot(self, x: Secret, y: Secret | torch.Tensor) -> Secret:
        """SecSP: scalar product over the last dimension (`protocols/secsp.py`)."""
        return sec_sp(self, x, y)

    # ----------------------------------------------------------------- composite protocols
    def square(self, a: Secret) -> Secret:
        """SecMul(a, a)."""
        return self.mul(a, a)

    def mul3(self, a: Secret, b: Secret | Public, c: Secret | Public) -> Secret:
        """SecMul3: [a·b·c] (`protocols/secmul3.py`)."""
        return sec_mul3(self, a, b, c)

    def ge2(self, u_i: Secret, v_i: Secret, u_j: Secret, v_j: Secret) -> Secret:
        """SecGE2 (Starfish §IV-B, Method 1): [u_i·v_j ≥ u_j·v_i], element-wise (`protocols/secge.py`)."""
        return sec_ge2(self, u_i, v_i, u_j, v_j)

    def ge3(self, w_i: Secret, b_i: Secret, w_j: Secret, b_j: Secret) -> Secret:
        """SecGE3 (Appendix C, Algorithm 5): signed-key comparison (2w − 1)·√b (`protocols/secge.py`)."""
        return sec_ge3(self, w_i, b_i, w_j, b_j)

    def ge4(self, w_i: Secret, a_i: Secret, v_i: Secret, w_j: Secret, a_j: Secret, v_j: Secret) -> Secret:
        """SecGE4 (Appendix C): SecGE3 comparing (2w − 1)·√(a/v) without division (`protocols/secge.py`)."""
        return sec_ge4(self, w_i, a_i, v_i, w_j, a_j, v_j)

    def clip_norm(self, x: Secret, clip: float) -> Secret:
        """SecClip: rows of x scaled by min(1, C/‖x‖), no norm revealed (`protocols/secclip.py`)."""
        return sec_clip(self, x, clip)

    def max(self, a: Secret, dim: int = 0) -> Secret:
        """SecMax: maximum along `dim` by a tree of SecGE + SecSel (`protocols/secmax.py`)."""
        return sec_max(self, a, dim)

    def sort_desc(self, keys: Secret, payload: Secret, method: str = "ge") -> tuple[Secret, Secret]:
        """SecSrt: bitonic sort, descending by key, payload columns swapped obliviously (`protocols/secsrt.py`).

        `keys` is (n,) for method "ge", (n, 2) holding (u, v) for method "ge2" (order by
        u/v without division), (n, 2) = (w, b) for "ge3", (n, 3) = (w, a, v) for "ge4"
        (Appendix C). Returns (sorted keys, sorted payload).
        """
        return sec_sort_desc(self, keys, payload, method)

    def top_set(self, keys: Secret, k: int, method: str = "ge") -> tuple[int, ...]:
        """SecTop: the positions of the k rows with the largest keys, opened as a set in row
        order (`protocols/sectop.py`); keys as for `sort_desc`, ties to the lower row."""
        return sec_top_set(self, keys, k, method)

    def inverse(self, k: Secret, method: str = "secmi", iterations: int | None = None) -> Secret:
        """Inverse of a batch of small square matrices (..., d, d) (`protocols/secmi.py`).

        "secmi": Algorithm 7 (reveal N = K·R for random invertible R, K⁻¹ = R·N⁻¹), refined
        until a bound on its error from the public N reaches one ulp (Newton–Schulz on K
        scaled to unit norm when N is singular or too ill-conditioned to refine from);
        "newton": Newton–Schulz iteration, nothing revealed (`iterations` steps, default
        `NEWTON_ITERATIONS_DEFAULT`).
        """
        return sec_inverse(self, k, method, NEWTON_ITERATIONS_DEFAULT if iterations is None else iterations)

    def threshold_flags(self, g: Secret, delta: Secret, sample: torch.Tensor | None = None) -> torch.Tensor:
        """SecTC (Algorithm 3): public flags f_j = 1 iff some |g_j(k)| > δ_j (`protocols/sectc.py`).

        `g` is (n, m), `delta` is (n,). Returns a public bool tensor of shape (n,).
        `sample`: optional PUBLIC coordinate indices checked first (sample-first pass,
        docs/ALGORITHM.md); reveals one extra bit per client (whether the sample decided its flag).
        """
        return sec_tc(self, g, delta, sample)
