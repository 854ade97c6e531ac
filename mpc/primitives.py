"""The primitives of two-party computation: what every backend implements itself.

A `Secret` is an opaque handle to a secret-shared tensor; only `reveal` turns it into a
public tensor. Public operands are plain torch tensors (or Python floats). Every method
is a protocol step that both parties must call in the same order with the same public
arguments.

`Primitives` is the interface the composite protocols of `mpc/protocols/` are written
against (they import nothing else of `mpc`), and the base of `mpc.backend.Backend`, which
binds those composites as methods. Three operations are *specialisable*: a portable
version exists as a protocol (`ge_prod` in `protocols/secge.py`, `select` = SecSel in
`protocols/secsel.py`, `dot` = SecSP in `protocols/secsp.py`) and `Backend` binds it, but
a backend may replace it by an equivalent one it computes better (exact products before
truncation, an exact choice in float64, one truncation per scalar product).

Besides arithmetic, a party's runtime needs three things from a backend without reaching
into its internals: `load_shares` wraps a share made elsewhere (a client's upload, a
checkpoint), `export_shares` returns this party's share for storage, and `all_gather`
exchanges PUBLIC integers with the other party (agreements on deadlines, digests, who
answered).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from mpc.costs import CostLedger

Public = torch.Tensor | float | int
"""A value both parties know (a model, a model difference, a constant)."""


class Prepared:
    """A public tensor prepared once for many products with secrets (`Primitives.prepare`).

    `value` is the float64 tensor; `payload` is what the backend derived from it (the CrypTen
    backend: its fixed-point encoding and scale), so repeated `mul`/`matmul`/`dot` calls with
    it skip re-encoding m-sized operands. Accepted wherever those take a public operand.
    """

    __slots__ = ("value", "payload")

    def __init__(self, value: torch.Tensor, payload: Any = None) -> None:
        self.value = value
        self.payload = payload

    @property
    def shape(self) -> torch.Size:
        return self.value.shape


class Secret(ABC):
    """Opaque handle to a secret-shared tensor. Use backend methods to operate on it."""

    @property
    @abstractmethod
    def shape(self) -> torch.Size:
        """Shape of the underlying tensor (public)."""

    def __len__(self) -> int:
        return self.shape[0]


class Fixed(ABC):
    """Handle to a secret operand fixed for many products (`Primitives.fix`).

    Valid in the session that fixed it (`Primitives.fixed_current`); never stored: a
    resumed run fixes its operands again.
    """

    @property
    @abstractmethod
    def shape(self) -> torch.Size:
        """Shape of the fixed operand (public)."""


class Primitives(ABC):
    """Operations on secret values that a backend implements (see the module docstring)."""

    #: short name recorded in reports ("plain" or "crypten")
    name: str = "abstract"
    #: True when values are really secret-shared between two parties
    is_secure: bool = False
    #: ulp of the encoding: the absolute error of one rounding or truncation is below
    #: 2·resolution (0.0: float64 arithmetic, treated as exact)
    resolution: float = 0.0

    def __init__(self, ledger: CostLedger | None = None) -> None:
        self.ledger = ledger if ledger is not None else CostLedger()

    # ----------------------------------------------------------------- cost accounting
    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        """Attribute the wall time, bytes and rounds of the enclosed calls to `name`."""
        with self.ledger.step(name, self._comm_snapshot):
            yield

    @contextmanager
    def fixed_repeats(self, again: bool) -> Iterator[None]:
        """One round of the caller's (blocks are not nested), and whether the fixed-operand
        products made inside come again, with the same operands and in the same order, in the
        caller's next round: only when they do does the CrypTen backend draw correlated
        randomness ahead for them, and the next round's block uses it
        (`mpc.plane.fixed_prefetch`; outside such a block it draws none). Both parties must
        pass the same value at the same protocol step (a public schedule); the plaintext
        backend ignores it."""
        yield

    @contextmanager
    def own_ledger(self) -> Iterator[CostLedger]:
        """Count the enclosed calls in a fresh ledger (yielded: the costs of this block alone),
        then add its totals to the backend's ledger, which a long-lived backend keeps cumulative."""
        outer, run = self.ledger, CostLedger()
        self.ledger = run
        try:
            yield run
        finally:
            self.ledger = outer
            outer.merge(run)

    def _comm_snapshot(self) -> dict[str, int | float]:
        """Current cumulative communication counters (bytes, rounds; online/offline).

        The plaintext backend communicates nothing; the CrypTen backend reads its
        communicator and the dealer's counters.
        """
        return {}

    # ----------------------------------------------------------------- creation, reveal, storage
    @abstractmethod
    def share(self, x: torch.Tensor, src: int = 0) -> Secret:
        """Secret-share a tensor known to party `src` (simulation and tests).

        In the service, client gradients arrive already shared and are loaded with
        `load_shares`; algorithms only call `share` for values a party computed itself.
        """

    @abstractmethod
    def reveal(self, x: Secret) -> torch.Tensor:
        """Open `x` to both parties; returns float64 (exact fixed-point decode)."""

    @abstractmethod
    def reveal_noised(self, x: Secret, sigma: float, noise_key: bytes | None = None) -> torch.Tensor:
        """Open x + noise, the distributed Gaussian mechanism (docs/PRIVACY.md, "Differential privacy").

        Every party that holds a share adds its own N(0, σ²) noise before opening, so the
        noise of the one honest party alone has standard deviation σ (a party that subtracts
        its own noise still faces σ). The noise comes from the OS CSPRNG, or, given this
        party's `noise_key`, from its keyed AES-CTR stream (`mpc.dp_noise.keyed_gaussian`):
        a repeated opening under the same key then carries the same draw, not a second one
        (Stage I's retry safety). The plaintext backend, standing for both parties, adds one
        N(0, σ²) draw. σ = 0 is `reveal`.
        """

    @abstractmethod
    def zeros(self, shape: Sequence[int]) -> Secret:
        """A sharing of zeros (no communication)."""

    @abstractmethod
    def random(self, shape: Sequence[int]) -> Secret:
        """A shared random tensor (entries ~ N(0, 1)-like) that no party knows (SecMI's mask R)."""

    @abstractmethod
    def keyed_random(self, shape: Sequence[int], key: bytes) -> Secret:
        """A shared N(0, I) tensor that no party knows, each party's part drawn from its own
        32-byte `key` (AES-256-CTR, `mpc.dp_noise.keyed_gaussian`): the same keys give the same
        tensor, so a repeated opening repeats the draw. The plaintext backend, standing for both
        parties, draws all of it from its one key."""

    @abstractmethod
    def load_shares(self, share: np.ndarray | torch.Tensor, precision_bits: int | None = None) -> Secret:
        """This party's int64 share made elsewhere (a client, a checkpoint) as a secret with
        `precision_bits` fractional bits (the backend's own by default); no communication."""

    @abstractmethod
    def export_shares(self, x: Secret) -> tuple[np.ndarray, int]:
        """This party's int64 share of `x` and its fractional bits (for storage; no communication)."""

    @abstractmethod
    def all_gather(self, values: Sequence[int]) -> list[list[int]]:
        """Exchange PUBLIC int64 values: [party 0's values, party 1's values] on both parties."""

    # ----------------------------------------------------------------- linear (local) ops
    @abstractmethod
    def add(self, a: Secret, b: Secret | Public) -> Secret:
        """SecAdd: a + b (local)."""

    @abstractmethod
    def sub(self, a: Secret, b: Secret | Public) -> Secret:
        """a − b (local)."""

    @abstractmethod
    def neg(self, a: Secret) -> Secret:
        """−a (local)."""

    @abstractmethod
    def mul(self, a: Secret, b: Secret | Public) -> Secret:
        """SecMul, element-wise with broadcasting; local when `b` is public."""

    @abstractmethod
    def matmul(self, a: Secret | torch.Tensor, b: Secret | torch.Tensor) -> Secret:
        """Matrix product; at least one operand is secret. Local when the other operand is
        public (e.g. u_i = ⟨[g_i], M_{i−1} − M_i⟩)."""

    @abstractmethod
    def fix(self, items: Sequence[Secret]) -> list[Fixed]:
        """Fix secret operands for many `fixed_matmul` / `fixed_dot` calls: the CrypTen backend
        opens each once under a fresh mask (`plane/fixed_beaver.py`), in one round for all."""

    @abstractmethod
    def fixed_secret(self, fixed: Fixed) -> Secret:
        """The fixed operand as a secret, held by its handle (the CrypTen backend: this party's
        Z_p, another sharing of the same value), so a caller keeping both holds it once."""

    @abstractmethod
    def fixed_current(self, fixed: Fixed) -> bool:
        """Whether `fixed` belongs to the running session (else fix its operand again)."""

    @abstractmethod
    def fixed_matmul(self, x: Secret, fixed: Sequence[Fixed], shape: Sequence[int]) -> Secret:
        """x @ Y with Y = stack(fixed operands) reshaped to `shape` (all operands of one shape):
        (K, m), or (b, K/b, m) for a batched x of three dimensions — one operand of m elements
        per row (`fixed_layout`); opens only x's size per call."""

    @abstractmethod
    def fixed_dot(self, a: Sequence[Fixed], b: Sequence[Fixed]) -> Secret:
        """[a_cᵀb_c] over all elements, for each pair c of fixed operands of one shape: shape
        (len(a),); opens nothing (the CrypTen backend asks the dealer for [B_aᵀB_b])."""

    def prepare(self, x: torch.Tensor) -> Prepared:
        """A public operand reused in many products (`Prepared`); the plain form keeps the float64 tensor."""
        return Prepared(torch.as_tensor(x, dtype=torch.float64))

    @abstractmethod
    def sum(self, a: Secret, dim: int | None = None) -> Secret:
        """Sum of elements (local)."""

    @abstractmethod
    def stack(self, items: Sequence[Secret], dim: int = 0) -> Secret:
        """Stack secrets along a new dimension (local)."""

    @abstractmethod
    def cat(self, items: Sequence[Secret], dim: int = 0) -> Secret:
        """Concatenate secrets along an existing dimension (local)."""

    @abstractmethod
    def index(self, a: Secret, key: Any) -> Secret:
        """`a[key]` with a public index (local)."""

    @abstractmethod
    def reshape(self, a: Secret, shape: Sequence[int]) -> Secret:
        """Reshape (local)."""

    @abstractmethod
    def transpose(self, a: Secret, dim0: int = 0, dim1: int = 1) -> Secret:
        """Swap two dimensions (local)."""

    # ----------------------------------------------------------------- non-linear
    @abstractmethod
    def ge(self, a: Secret, b: Secret | Public) -> Secret:
        """SecGE: shared bit [a ≥ b], element-wise."""

    @abstractmethod
    def div(self, a: Secret, b: Secret | Public) -> Secret:
        """SecDiv: a / b (b > 0 in the documented range)."""

    @abstractmethod
    def sqrt(self, a: Secret) -> Secret:
        """√a, element-wise (a ≥ 0; the documented range is 10⁻³ ≤ a ≤ 150)."""

    # ----------------------------------------------------------------- specialisable
    @abstractmethod
    def ge_prod(self, a: Secret, b: Secret | Public, c: Secret | Public, d: Secret | Public) -> Secret:
        """Shared bit [a·b ≥ c·d], element-wise with broadcasting (SecGE2's and SecTC's comparison)."""

    @abstractmethod
    def select(self, bit: Secret, a: Secret | Public, b: Secret | Public) -> Secret:
        """SecSel: a where the shared bit is 1, else b."""

    @abstractmethod
    def dot(self, x: Secret, y: Secret | torch.Tensor) -> Secret:
        """SecSP: scalar product over the last dimension."""


def fixed_layout(x_dims: int, count: int, elements: int, shape: Sequence[int]) -> tuple[int, int]:
    """(batch entries, operands per entry) of a `fixed_matmul` of `count` operands of `elements`
    each: `shape` is (K, m), or (b, K/b, m) when x has three dimensions; ValueError otherwise."""
    batched = len(shape) == 3 and x_dims == 3
    batch = shape[0] if batched else 1
    per = count // batch if batch else 0
    if len(shape) != (3 if batched else 2) or tuple(shape[-2:]) != (per, elements) or per * batch != count:
        raise ValueError(f"fixed_matmul: shape {list(shape)} must hold one of the {count} fixed operands per row")
    return batch, per
