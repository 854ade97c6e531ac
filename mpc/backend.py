"""The backend interface: what the unlearning algorithms may do with secret values.

`unlearning/` is written once against `Backend` and runs on two implementations:

* `mpc.plain_backend.PlainBackend` — values are float64 torch tensors (reference,
  fast sweeps, ground truth for the secure run);
* `mpc.crypten_backend.CrypTenBackend` — values are CrypTen arithmetic shares held
  by two parties with a dealer (TTP) providing correlated randomness.

A `Secret` is an opaque handle; only `reveal` turns it into a public tensor. Public
operands are plain torch tensors (or Python floats). Every method is a protocol step
that both parties must call in the same order with the same public arguments.

The primitive operations (marked *primitive*) are implemented by each backend. The
composite protocols (SecGE2, SecSel, SecMax, SecSrt, SecMI, SecTC, ...) are written once
in `mpc/protocols/` on top of the primitives, so both backends run the same network
of comparisons and agree exactly on orders, selections and flags; a backend may
override a composite with a batched but equivalent implementation.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import contextmanager
from typing import Any, Iterator, Sequence

import torch

from mpc.costs import CostLedger

Public = torch.Tensor | float | int
"""A value both parties know (a model, a model difference, a constant)."""


class Secret(ABC):
    """Opaque handle to a secret-shared tensor. Use backend methods to operate on it."""

    @property
    @abstractmethod
    def shape(self) -> torch.Size:
        """Shape of the underlying tensor (public)."""

    def __len__(self) -> int:
        return self.shape[0]


class Backend(ABC):
    """Operations on secret values; see the module docstring for the contract."""

    #: short name recorded in reports ("plain" or "crypten")
    name: str = "abstract"
    #: True when values are really secret-shared between two parties
    is_secure: bool = False

    def __init__(self, ledger: CostLedger | None = None) -> None:
        self.ledger = ledger if ledger is not None else CostLedger()

    # ----------------------------------------------------------------- cost accounting
    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        """Attribute the wall time, bytes and rounds of the enclosed calls to `name`."""
        with self.ledger.step(name, self._comm_snapshot):
            yield

    def _comm_snapshot(self) -> dict[str, int]:
        """Current cumulative communication counters (bytes, rounds; online/offline).

        The plaintext backend communicates nothing; the CrypTen backend reads its
        communicator and the dealer's counters.
        """
        return {}

    # ----------------------------------------------------------------- creation, reveal
    @abstractmethod
    def share(self, x: torch.Tensor, src: int = 0) -> Secret:
        """*primitive* Secret-share a tensor known to party `src` (simulation and tests).

        In the service, client gradients arrive already shared and are loaded by the
        job runner; algorithms only call `share` for values a party computed itself.
        """

    @abstractmethod
    def reveal(self, x: Secret) -> torch.Tensor:
        """*primitive* Open `x` to both parties; returns float64 (exact fixed-point decode)."""

    @abstractmethod
    def zeros(self, shape: Sequence[int]) -> Secret:
        """*primitive* A sharing of zeros (no communication)."""

    # ----------------------------------------------------------------- linear (local) ops
    @abstractmethod
    def add(self, a: Secret, b: Secret | Public) -> Secret:
        """*primitive* SecAdd: a + b (local)."""

    @abstractmethod
    def sub(self, a: Secret, b: Secret | Public) -> Secret:
        """*primitive* a − b (local)."""

    @abstractmethod
    def neg(self, a: Secret) -> Secret:
        """*primitive* −a (local)."""

    @abstractmethod
    def mul(self, a: Secret, b: Secret | Public) -> Secret:
        """*primitive* SecMul, element-wise with broadcasting; local when `b` is public."""

    @abstractmethod
    def matmul(self, a: Secret | torch.Tensor, b: Secret | torch.Tensor) -> Secret:
        """*primitive* Matrix product; at least one operand is secret. Local when the
        other operand is public (e.g. u_i = ⟨[g_i], M_{i−1} − M_i⟩)."""

    @abstractmethod
    def sum(self, a: Secret, dim: int | None = None) -> Secret:
        """*primitive* Sum of elements (local)."""

    @abstractmethod
    def stack(self, items: Sequence[Secret], dim: int = 0) -> Secret:
        """*primitive* Stack secrets along a new dimension (local)."""

    @abstractmethod
    def cat(self, items: Sequence[Secret], dim: int = 0) -> Secret:
        """*primitive* Concatenate secrets along an existing dimension (local)."""

    @abstractmethod
    def index(self, a: Secret, key: Any) -> Secret:
        """*primitive* `a[key]` with a public index (local)."""

    @abstractmethod
    def reshape(self, a: Secret, shape: Sequence[int]) -> Secret:
        """*primitive* Reshape (local)."""

    @abstractmethod
    def transpose(self, a: Secret, dim0: int = 0, dim1: int = 1) -> Secret:
        """*primitive* Swap two dimensions (local)."""

    # ----------------------------------------------------------------- non-linear primitives
    @abstractmethod
    def ge(self, a: Secret, b: Secret | Public) -> Secret:
        """*primitive* SecGE: shared bit [a ≥ b], element-wise."""

    @abstractmethod
    def div(self, a: Secret, b: Secret | Public) -> Secret:
        """*primitive* SecDiv: a / b (b > 0 in the documented range)."""

    def random(self, shape: Sequence[int]) -> Secret:
        """*primitive* A shared random tensor (entries ~ N(0, 1)-like) that no party knows.

        Used as the mask R of SecMI (Algorithm 7). Each backend must implement it.
        """
        raise NotImplementedError(f"{type(self).__name__} does not provide shared randomness")

    def ge_prod(self, a: Secret, b: Secret | Public, c: Secret | Public, d: Secret | Public) -> Secret:
        """Shared bit [a·b ≥ c·d], element-wise with broadcasting.

        The building block of SecGE2 and of SecTC's squared comparison. The default is
        SecGE(SecMul(a, b), SecMul(c, d)); the CrypTen backend compares the products
        before truncation, which is exact on the fixed-point grid.
        """
        return self.ge(self.mul(a, b), self.mul(c, d))

    # ----------------------------------------------------------------- composite protocols
    # Implemented in mpc/protocols/ on top of the primitives; see each module.
    def square(self, a: Secret) -> Secret:
        """SecMul(a, a)."""
        return self.mul(a, a)

    def ge2(self, u_i: Secret, v_i: Secret, u_j: Secret, v_j: Secret) -> Secret:
        """SecGE2 (Starfish §IV-B, Method 1): [u_i·v_j ≥ u_j·v_i], element-wise."""
        from mpc.protocols.compare import sec_ge2

        return sec_ge2(self, u_i, v_i, u_j, v_j)

    def select(self, bit: Secret, a: Secret | Public, b: Secret | Public) -> Secret:
        """SecSel: bit·a + (1 − bit)·b, i.e. a where bit = 1 else b."""
        from mpc.protocols.select import sec_sel

        return sec_sel(self, bit, a, b)

    def max(self, a: Secret, dim: int = 0) -> Secret:
        """SecMax: maximum along `dim` by a tree of SecGE + SecSel."""
        from mpc.protocols.maximum import sec_max

        return sec_max(self, a, dim)

    def sort_desc(self, keys: Secret, payload: Secret, method: str = "ge") -> tuple[Secret, Secret]:
        """SecSrt: bitonic sort, descending by key, payload columns swapped obliviously.

        `keys` is (n,) for method "ge", (n, 2) holding (u, v) for method "ge2" (order by
        u/v without division), (n, 2) = (w, b) for "ge3", (n, 3) = (w, a, v) for "ge4"
        (Appendix C). Returns (sorted keys, sorted payload).
        """
        from mpc.protocols.sort import sec_sort_desc

        return sec_sort_desc(self, keys, payload, method)

    def inverse(self, k: Secret, method: str = "secmi", iterations: int | None = None) -> Secret:
        """Inverse of a batch of small square matrices (..., d, d).

        "secmi": Algorithm 7 (reveal N = K·R for random invertible R, K⁻¹ = R·N⁻¹);
        "newton": Newton–Schulz iteration, nothing revealed (`iterations` steps, default
        `mpc.protocols.inverse.NEWTON_ITERATIONS_DEFAULT`).
        """
        from mpc.protocols.inverse import NEWTON_ITERATIONS_DEFAULT, sec_inverse

        return sec_inverse(self, k, method, NEWTON_ITERATIONS_DEFAULT if iterations is None else iterations)

    def threshold_flags(self, g: Secret, delta: Secret, sample: torch.Tensor | None = None) -> torch.Tensor:
        """SecTC (Algorithm 3): public flags f_j = 1 iff some |g_j(k)| > δ_j.

        `g` is (n, m), `delta` is (n,). Returns a public bool tensor of shape (n,).
        `sample`: optional PUBLIC coordinate indices checked first (DESIGN §6.4); reveals
        one extra bit per client (whether the sample decided its flag).
        """
        from mpc.protocols.threshold import sec_tc

        return sec_tc(self, g, delta, sample)

    def mul3(self, a: Secret, b: Secret | Public, c: Secret | Public) -> Secret:
        """SecMul3: [a·b·c]."""
        from mpc.protocols.arith import sec_mul3

        return sec_mul3(self, a, b, c)

    def dot(self, x: Secret, y: Secret | torch.Tensor) -> Secret:
        """SecSP: scalar product over the last dimension."""
        from mpc.protocols.arith import sec_sp

        return sec_sp(self, x, y)

    def ge3(self, w_i: Secret, b_i: Secret, w_j: Secret, b_j: Secret) -> Secret:
        """SecGE3 (Appendix C, Algorithm 5): signed-key comparison (2w − 1)·√b."""
        from mpc.protocols.compare import sec_ge3

        return sec_ge3(self, w_i, b_i, w_j, b_j)

    def ge4(self, w_i: Secret, a_i: Secret, v_i: Secret, w_j: Secret, a_j: Secret, v_j: Secret) -> Secret:
        """SecGE4 (Appendix C): SecGE3 comparing (2w − 1)·√(a/v) without division."""
        from mpc.protocols.compare import sec_ge4

        return sec_ge4(self, w_i, a_i, v_i, w_j, a_j, v_j)
