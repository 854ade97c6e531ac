"""`CrypTenBackend`: the `Backend` primitives on two-party CrypTen arithmetic shares.

A secret is this party's int64 share of a fixed-point value together with its scale
exponent: `bits = f` for ordinary values (x̄ = round(x·2^f)), `bits = 0` for integer
sharings such as comparison bits. Local operations (add, sum, index, reshape, products
with public operands) act on the share tensor directly; interactive ones use CrypTen's
protocols with the dealer (TTP provider) supplying Beaver triples:

* SecMul / matmul of two secrets — Beaver (`crypten.mpc.primitives.beaver`), one round;
  the 2f-bit product is truncated locally back to f bits (CrypTen's 2-party truncation;
  fault probability ≈ |x·y|·2^(2f−64) per output element, see docs/NUMERICS.md). A
  product with a bit (bits = 0) needs no truncation and is exact.
* SecGE — the sign bit of the shared difference by a packed carry tree over its shares'
  bits (`plane/sign_bit.py`, `_ltz`), giving an integer-shared bit (bits = 0), so SecSel
  and bit sums are exact.
* `ge_prod` ([a·b ≥ c·d], SecGE2 and SecTC) compares the products BEFORE truncation,
  which is exact on the fixed-point grid and never loses tiny squares.
* fixed-operand products (`fix`, `fixed_matmul`, `fixed_dot`, `plane/fixed_beaver.py`)
  — an operand multiplied in many rounds is opened once under a mask drawn from the
  session's derived PRG streams; each product then opens only the other factor and asks
  the dealer for a `matmul_fixed` pair; a scalar product of two fixed operands opens
  nothing (`dot_fixed`); truncated like matmul. Handles hold the session's dealer link and
  are stale in any other session (`fixed_current`).
* SecDiv — CrypTen's Newton–Raphson reciprocal (positive denominators), two refinement
  steps y ← y + y·(1 − b·y) that keep full precision for large b, then SecMul.
* reveal — all-reduce of the int64 shares, decoded here as int64 / 2^bits in float64
  (CrypTen's `get_plain_text` decodes some negatives 1.0 too low). A revealed magnitude
  above `fault_bound` can only come from a truncation fault and raises
  `TruncationFaultError` so the caller can retry the step.

Lock-step check: every interactive operation first folds (operation, shapes, scales,
digest of public operands) into a running SHA-256 transcript and, with
`step_check="op"`, exchanges 8 bytes of it with the peer (one extra small round); a
mismatch raises `OutOfStepError` on both parties instead of computing garbage. With
`step_check="boundary"` the exchange happens only at reveals and at `step()` boundaries.

Costs: online bytes/rounds are this party's communicator counters (CrypTen counts what a
party sends and receives; the dealer has a connection of its own); offline bytes/seconds
are the dealer requests (party 0 fetches its shares of the triples; party 1 expands its
key locally), counted by the session's dealer link.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from mpc.backend import Backend, Public, Secret
from mpc.costs import CostLedger
from mpc.crypten_loader import load_crypten
from mpc.dp_noise import keyed_gaussian, party_gaussian
from mpc.fixedpoint import DEFAULT_PRECISION_BITS
from mpc.plane.dealer_client import DealerLink
from mpc.plane.fixed_beaver import FixedShares, fix_operands, fixed_dot, fixed_product
from mpc.plane.fixed_masks import fixed_mask
from mpc.plane.fixed_prefetch import next_round
from mpc.plane.provider import (
    DealerProvider,
    b2a_bits,
    binary_triple,
    fixed_dot_share,
    fixed_matmul_pair,
    session_link,
)
from mpc.plane.request_blocks import item_groups
from mpc.plane.sign_bit import sign_bits
from mpc.primitives import Fixed, Prepared, fixed_layout

load_crypten()
import crypten.communicator as comm  # noqa: E402
from crypten.config import cfg as crypten_cfg  # noqa: E402
from crypten.mpc import MPCTensor  # noqa: E402
from crypten.mpc.primitives import ArithmeticSharedTensor, beaver  # noqa: E402

STEP_CHECK_MODES = ("op", "boundary", "off")
CHUNK_ELEMENTS_DEFAULT = 1 << 18
"""Comparisons on more elements are split into chunks of this size (bounds memory)."""
FAULT_BOUND_DEFAULT = float(2**24)
"""|revealed value| above this is a truncation fault. A fault adds ±2^(64−2f) = ±2^32 (f = 16)
to one element; legitimate values stay below the codec's 2^20, so faults are caught even
after scaling by public weights ≥ 2^-8 (docs/NUMERICS.md)."""
RECIPROCAL_ITERATIONS_DEFAULT = 16
"""Newton–Raphson steps of SecDiv's reciprocal (valid range in docs/NUMERICS.md)."""
RECIPROCAL_REFINE_STEPS = 2
#: CrypTen's inverse-square-root Newton steps (its initial guess ≈ 2 needs ~7 to reach 1/√10⁻³)
SQRT_ITERATIONS = 10
#: Heron refinements y ← (y + a/y)/2 of CrypTen's √a, each through the refined `div`
SQRT_REFINE_STEPS = 2
"""Residual-form Newton steps after CrypTen's reciprocal (precision for large denominators)."""


class OutOfStepError(RuntimeError):
    """The two parties are not executing the same protocol step."""


class TruncationFaultError(ArithmeticError):
    """A revealed value is outside every legitimate range: a local-truncation fault."""


class CrypTenSecret(Secret):
    """This party's int64 share and the scale exponent (value = Σ shares / 2^bits)."""

    __slots__ = ("share", "bits")

    def __init__(self, share: torch.Tensor, bits: int) -> None:
        self.share = share
        self.bits = bits

    @property
    def shape(self) -> torch.Size:
        return self.share.shape

    def __repr__(self) -> str:  # never print the share itself
        return f"CrypTenSecret(shape={tuple(self.share.shape)}, bits={self.bits})"


class CrypTenFixed(Fixed):
    """A fixed operand: its number in the session, the opened E = Y − B_Y, this party's
    Z_p (Z_0 + Z_1 = Y), the scale exponent and the session's dealer link."""

    __slots__ = ("number", "opened", "own", "bits", "link")

    def __init__(self, number: int, opened: torch.Tensor, own: torch.Tensor, bits: int, link: DealerLink) -> None:
        self.number, self.opened, self.own, self.bits, self.link = number, opened, own, bits, link

    @property
    def shape(self) -> torch.Size:
        return self.opened.shape

    def __repr__(self) -> str:  # never print the share
        return f"CrypTenFixed(number={self.number}, shape={tuple(self.opened.shape)}, bits={self.bits})"


SHORT_INNER = 8
"""Ring matrix products with at most this inner dimension are formed as multiply-adds."""


def ring_matmul(left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    """left @ right in Z_2^64 (int64, wrapping). With a 2-D right operand (k, m) and k ≤
    `SHORT_INNER` it is Σ_j left[..., j]·right[j], one multiply-add of the result's size per j
    (torch's int64 matmul has no fast kernel; the same ring elements)."""
    k = left.shape[-1] if left.dim() else 0
    if right.dim() != 2 or left.dim() == 0 or not 0 < k <= SHORT_INNER or right.shape[0] != k:
        return torch.matmul(left, right)
    out = left[..., 0:1] * right[0]
    for j in range(1, k):
        out.addcmul_(left[..., j : j + 1], right[j])
    return out


def _open_xor(shares: list[torch.Tensor]) -> list[torch.Tensor]:
    """The XOR of both parties' int64 shares of each tensor, in one round (binary openings)."""
    return comm.get().all_reduce(shares, op=torch.distributed.ReduceOp.BXOR, batched=True)


def _to_tensor(x: Public | Prepared) -> torch.Tensor:
    if isinstance(x, Prepared):
        return x.value
    return torch.as_tensor(x, dtype=torch.float64)


def _is_integral(x: torch.Tensor) -> bool:
    return bool(torch.all(x == torch.round(x))) and bool(torch.all(x.abs() < 2**52))


class CrypTenBackend(Backend):
    """Two-party secure backend; both parties create one in an open `mpc.session.Session`.

    Options: `step_check` ("op" | "boundary" | "off", see the module doc), `chunk_elements`
    (comparison batch size), `fault_bound` (reveal range check), `reciprocal_iterations`
    (SecDiv), `allow_tfp` (unit tests only: accept CrypTen's insecure TFP provider).
    """

    name = "crypten"
    is_secure = True

    def __init__(
        self,
        precision_bits: int = DEFAULT_PRECISION_BITS,
        ledger: CostLedger | None = None,
        step_check: str = "op",
        chunk_elements: int = CHUNK_ELEMENTS_DEFAULT,
        fault_bound: float = FAULT_BOUND_DEFAULT,
        reciprocal_iterations: int = RECIPROCAL_ITERATIONS_DEFAULT,
        allow_tfp: bool = False,
    ) -> None:
        super().__init__(ledger)
        if not comm.is_initialized():
            raise RuntimeError("open an mpc.session.Session before creating a CrypTenBackend")
        if step_check not in STEP_CHECK_MODES:
            raise ValueError(f"step_check must be one of {STEP_CHECK_MODES}")
        if crypten_cfg.mpc.provider != "TTP" and not allow_tfp:
            from mpc.session import InsecureProviderError

            raise InsecureProviderError(
                "CrypTenBackend requires the TTP provider (a separate dealer); TFP is for unit tests only"
            )
        self.f = precision_bits
        self.resolution = 2.0**-precision_bits
        self.rank = comm.get().get_rank()
        self.step_check = step_check
        self.chunk_elements = chunk_elements
        self.fault_bound = fault_bound
        self.reciprocal_iterations = reciprocal_iterations
        self.reset_transcript()

    # ------------------------------------------------------------------ accounting
    def _comm_snapshot(self) -> dict[str, int | float]:  # type: ignore[override]
        c = comm.get()
        link = DealerProvider.link
        return {
            "online_bytes": int(c.comm_bytes),
            "online_rounds": int(c.comm_rounds),
            "offline_bytes": int(link.bytes) if link is not None else 0,
            "offline_seconds": float(link.seconds) if link is not None else 0.0,
        }

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        """Named cost step; parties check they enter the same step (unless step_check="off")."""
        if self.step_check != "off":
            self._sync("step", name, force=True)
        with super().step(name):
            yield

    # ------------------------------------------------------------------ lock-step check
    def reset_transcript(self, label: str = "") -> None:
        """Start a fresh transcript (both parties, e.g. at the start of each job or task)."""
        self._transcript = hashlib.sha256(b"starfish-mpc-transcript-v1" + label.encode())
        self._op_count = 0

    def _sync(self, op: str, *parts: Any, force: bool = False) -> None:
        """Fold an operation into the transcript; exchange and compare it when due."""
        self._op_count += 1
        h = self._transcript
        h.update(op.encode())
        for p in parts:
            if isinstance(p, torch.Tensor):
                h.update(str((tuple(p.shape), str(p.dtype))).encode())
                h.update(p.detach().contiguous().cpu().numpy().tobytes())
            else:
                h.update(repr(p).encode())
        if self.step_check == "off" or (self.step_check == "boundary" and not force):
            return
        mine = int.from_bytes(h.digest()[:8], "little", signed=True)
        theirs = comm.get().all_gather(torch.tensor([mine], dtype=torch.long))
        if any(int(t.item()) != mine for t in theirs):
            raise OutOfStepError(
                f"parties out of step at operation #{self._op_count} ({op} {parts[:1]!r}): "
                "the peer executed a different protocol step"
            )

    def _sig(self, *xs: Secret | Public) -> list[Any]:
        out: list[Any] = []
        for x in xs:
            if isinstance(x, CrypTenSecret):
                out.append(("S", tuple(x.shape), x.bits))
            elif isinstance(x, Secret):
                raise TypeError(f"CrypTenBackend cannot operate on {type(x).__name__}")
            else:
                out.append(_to_tensor(x))
        return out

    # ------------------------------------------------------------------ encoding helpers
    def _encode(self, x: torch.Tensor, bits: int) -> torch.Tensor:
        if not torch.isfinite(x).all():
            raise ValueError("public operand contains NaN or infinity")
        scaled = x * float(2**bits)
        if scaled.numel() and float(scaled.abs().max()) >= 2.0**62:
            raise ValueError("public operand too large for the fixed-point ring")
        return torch.round(scaled).to(torch.long)

    def _lift(self, x: CrypTenSecret, bits: int) -> CrypTenSecret:
        """Exact rescale to more fractional bits (local multiplication by 2^(Δbits))."""
        if x.bits == bits:
            return x
        if x.bits > bits:
            raise ValueError("cannot lift to fewer bits")
        return CrypTenSecret(x.share * (1 << (bits - x.bits)), bits)

    def _truncate(self, share: torch.Tensor, drop_bits: int) -> torch.Tensor:
        """CrypTen's 2-party local truncation: each party divides its share by 2^drop."""
        if drop_bits == 0:
            return share
        return share.div(1 << drop_bits, rounding_mode="trunc")

    def _ast(self, x: CrypTenSecret) -> ArithmeticSharedTensor:
        return ArithmeticSharedTensor.from_shares(x.share, precision=0)

    def _public_for(self, x: CrypTenSecret, b: Public) -> tuple[CrypTenSecret, torch.Tensor]:
        """Encode a public addend at x's scale, lifting an integer sharing if b is fractional."""
        bt = _to_tensor(b)
        if x.bits < self.f and not _is_integral(bt * float(2**x.bits)):
            x = self._lift(x, self.f)
        return x, self._encode(bt, x.bits)

    def _add_public(self, x: CrypTenSecret, b: Public, sign: int) -> CrypTenSecret:
        x, enc = self._public_for(x, b)
        share, enc = torch.broadcast_tensors(x.share, enc)
        share = share + sign * enc if self.rank == 0 else share.clone()
        return CrypTenSecret(share, x.bits)

    def _aligned(self, a: CrypTenSecret, b: CrypTenSecret) -> tuple[CrypTenSecret, CrypTenSecret]:
        bits = max(a.bits, b.bits)
        return self._lift(a, bits), self._lift(b, bits)

    def _check(self, x: Secret | Public) -> CrypTenSecret:
        if not isinstance(x, CrypTenSecret):
            raise TypeError(f"expected a CrypTenSecret, got {type(x).__name__}")
        return x

    # ------------------------------------------------------------------ creation, reveal
    def share(self, x: torch.Tensor, src: int = 0) -> CrypTenSecret:
        """Party `src` encodes x and splits it with CSPRNG masks; the other receives its share.

        Both parties pass a tensor of the same shape (the non-source party's values are
        ignored). One message of 8 bytes per element.
        """
        from mpc.fixedpoint import random_ring

        x = _to_tensor(x)
        self._sync("share", tuple(x.shape), src)
        if self.rank == src:
            enc = self._encode(x, self.f)
            mask = torch.from_numpy(random_ring(tuple(enc.shape)).copy()).reshape(enc.shape)
            comm.get().send(mask, 1 - src)
            return CrypTenSecret(enc - mask, self.f)
        mask = comm.get().recv(torch.zeros(tuple(x.shape), dtype=torch.long), src=src)
        return CrypTenSecret(mask, self.f)

    def load_shares(self, share: torch.Tensor | np.ndarray, precision_bits: int | None = None) -> CrypTenSecret:
        """Wrap this party's int64 share made elsewhere (e.g. by a client); no communication."""
        t = torch.from_numpy(np.ascontiguousarray(share)) if isinstance(share, np.ndarray) else share
        if t.dtype != torch.long:
            raise TypeError(f"shares must be int64, got {t.dtype}")
        return CrypTenSecret(t.clone(), self.f if precision_bits is None else precision_bits)

    def export_shares(self, x: Secret) -> tuple[np.ndarray, int]:
        """This party's int64 share of x and its scale exponent (no communication)."""
        x = self._check(x)
        return x.share.detach().cpu().numpy(), x.bits

    def all_gather(self, values: Sequence[int]) -> list[list[int]]:
        """Exchange public int64 values with the peer: [party 0's, party 1's] (one round)."""
        tensors = comm.get().all_gather(torch.tensor([int(v) for v in values], dtype=torch.long))
        return [t.tolist() for t in tensors]

    def reveal_encoded(self, x: Secret) -> torch.Tensor:
        """Open x's ring element (int64) to both parties, without decoding."""
        x = self._check(x)
        self._sync("reveal", *self._sig(x), force=True)
        return comm.get().all_reduce(x.share)

    def reveal(self, x: Secret) -> torch.Tensor:
        x = self._check(x)
        value = self.reveal_encoded(x).to(torch.float64) / float(2**x.bits)
        if value.numel() and float(value.abs().max()) > self.fault_bound:
            raise TruncationFaultError(
                f"revealed magnitude {float(value.abs().max()):.3g} exceeds {self.fault_bound:.3g}: "
                "a local-truncation fault (or inputs outside the documented range); retry the step"
            )
        return value

    def reveal_noised(self, x: Secret, sigma: float, noise_key: bytes | None = None) -> torch.Tensor:
        """Open x + n_0 + n_1: this party adds its own n_p ~ N(0, σ²) (OS CSPRNG, or keyed by
        `noise_key`; never sent alone) to its share at x's scale, then the usual reveal. Lift
        integer sharings first."""
        x = self._lift(self._check(x), self.f)
        noise = self._encode(party_gaussian(tuple(x.shape), sigma, noise_key), x.bits)
        return self.reveal(CrypTenSecret(x.share + noise, x.bits))

    def zeros(self, shape: Sequence[int]) -> CrypTenSecret:
        return CrypTenSecret(torch.zeros(tuple(shape), dtype=torch.long), self.f)

    def random(self, shape: Sequence[int]) -> CrypTenSecret:
        """R = R_0 + R_1 with each party's R_p ~ N(0, 1/2) drawn from a CSPRNG-seeded
        generator and never sent: R ~ N(0, 1) and neither party knows it."""
        gen = torch.Generator().manual_seed(int.from_bytes(os.urandom(8), "little") >> 1)
        local = torch.randn(tuple(shape), generator=gen, dtype=torch.float64) / math.sqrt(2.0)
        return CrypTenSecret(self._encode(local, self.f), self.f)

    def keyed_random(self, shape: Sequence[int], key: bytes) -> CrypTenSecret:
        """R = R_0 + R_1 with each party's R_p ~ N(0, 1/2) from its own keyed AES-CTR stream
        (`mpc.dp_noise.keyed_gaussian`), never sent: R ~ N(0, 1), neither party knows it, and
        the same keys give the same R."""
        local = keyed_gaussian(key, tuple(shape), 1.0 / math.sqrt(2.0))
        return CrypTenSecret(self._encode(local, self.f), self.f)

    # ------------------------------------------------------------------ local ops
    def add(self, a: Secret, b: Secret | Public) -> CrypTenSecret:
        a = self._check(a)
        if isinstance(b, Secret):
            x, y = self._aligned(a, self._check(b))
            return CrypTenSecret(x.share + y.share, x.bits)
        return self._add_public(a, b, 1)

    def sub(self, a: Secret, b: Secret | Public) -> CrypTenSecret:
        a = self._check(a)
        if isinstance(b, Secret):
            x, y = self._aligned(a, self._check(b))
            return CrypTenSecret(x.share - y.share, x.bits)
        return self._add_public(a, b, -1)

    def neg(self, a: Secret) -> CrypTenSecret:
        a = self._check(a)
        return CrypTenSecret(-a.share, a.bits)

    def sum(self, a: Secret, dim: int | None = None) -> CrypTenSecret:
        a = self._check(a)
        return CrypTenSecret(a.share.sum() if dim is None else a.share.sum(dim), a.bits)

    def stack(self, items: Sequence[Secret], dim: int = 0) -> CrypTenSecret:
        xs = [self._check(i) for i in items]
        bits = max(x.bits for x in xs)
        return CrypTenSecret(torch.stack([self._lift(x, bits).share for x in xs], dim), bits)

    def cat(self, items: Sequence[Secret], dim: int = 0) -> CrypTenSecret:
        xs = [self._check(i) for i in items]
        bits = max(x.bits for x in xs)
        return CrypTenSecret(torch.cat([self._lift(x, bits).share for x in xs], dim), bits)

    def index(self, a: Secret, key: Any) -> CrypTenSecret:
        a = self._check(a)
        return CrypTenSecret(a.share[key], a.bits)

    def reshape(self, a: Secret, shape: Sequence[int]) -> CrypTenSecret:
        a = self._check(a)
        return CrypTenSecret(a.share.reshape(tuple(shape)), a.bits)

    def transpose(self, a: Secret, dim0: int = 0, dim1: int = 1) -> CrypTenSecret:
        a = self._check(a)
        return CrypTenSecret(a.share.transpose(dim0, dim1), a.bits)

    # ------------------------------------------------------------------ products
    def _raw_product(self, op: str, a: CrypTenSecret, b: Secret | Public, left_public: bool = False) -> CrypTenSecret:
        """Untruncated product; the result has bits = a.bits + bits(b)."""
        if isinstance(b, Secret):
            b = self._check(b)
            fn = getattr(beaver, op)
            if op == "mul" and b is a:
                raw = beaver.square(self._ast(a)).share
            else:
                raw = fn(self._ast(a), self._ast(b)).share
            return CrypTenSecret(raw, a.bits + b.bits)
        if isinstance(b, Prepared):
            enc, bits = b.payload
        else:
            bt = _to_tensor(b)
            bits = 0 if _is_integral(bt) else self.f
            enc = self._encode(bt, bits)
        if op == "mul":
            raw = a.share * enc
        elif left_public:
            raw = ring_matmul(enc, a.share)
        else:
            raw = ring_matmul(a.share, enc)
        return CrypTenSecret(raw, a.bits + bits)

    def prepare(self, x: torch.Tensor) -> Prepared:
        """Encode a public operand once (integral values at scale 0, others at f bits)."""
        value = _to_tensor(x)
        bits = 0 if _is_integral(value) else self.f
        return Prepared(value, (self._encode(value, bits), bits))

    def _to_precision(self, x: CrypTenSecret) -> CrypTenSecret:
        if x.bits <= self.f:
            return x
        return CrypTenSecret(self._truncate(x.share, x.bits - self.f), self.f)

    def mul(self, a: Secret, b: Secret | Public) -> CrypTenSecret:
        a = self._check(a)
        if isinstance(b, Secret):
            self._sync("mul", *self._sig(a, b))
        return self._to_precision(self._raw_product("mul", a, b))

    def dot(self, x: Secret, y: Secret | torch.Tensor) -> CrypTenSecret:
        """SecSP: Σ_k x_k·y_k over the last dimension with ONE truncation of the sum of the
        untruncated products (error < 2 ulp whatever the length, instead of 2 ulp per term)."""
        x = self._check(x)
        if isinstance(y, Secret):
            self._sync("dot", *self._sig(x, y))
        raw = self._raw_product("mul", x, y)
        return self._to_precision(CrypTenSecret(raw.share.sum(len(raw.share.shape) - 1), raw.bits))

    def matmul(self, a: Secret | torch.Tensor, b: Secret | torch.Tensor) -> CrypTenSecret:
        if isinstance(a, Secret):
            if isinstance(b, Secret):
                self._sync("matmul", *self._sig(a, b))
            return self._to_precision(self._raw_product("matmul", self._check(a), b))
        if not isinstance(b, Secret):
            raise TypeError("matmul needs at least one secret operand")
        return self._to_precision(self._raw_product("matmul", self._check(b), a, left_public=True))

    # ------------------------------------------------------------------ fixed operands
    def fix(self, items: Sequence[Secret]) -> list[Fixed]:
        """Open E = Y − B_Y for every item in one round (`plane/fixed_beaver.py`); the
        masks' shares come from this session's derived PRG streams, numbered in order."""
        ys = [self._check(y) for y in items]
        if not ys:
            return []
        self._sync("fix", *self._sig(*ys))
        link = session_link()
        numbers = link.number_fixed(len(ys))
        masks = [fixed_mask(link.prg, i, tuple(y.shape)) for i, y in zip(numbers, ys, strict=True)]
        views = fix_operands(
            self.rank, [y.share for y in ys], masks, lambda ts: comm.get().all_reduce(ts, batched=True)
        )
        return [CrypTenFixed(i, v.opened, v.own, y.bits, link) for i, v, y in zip(numbers, views, ys, strict=True)]

    def fixed_secret(self, fixed: Fixed) -> CrypTenSecret:
        """[Y] as the sharing Z_0 + Z_1 = Y the handle keeps (no copy, nothing opened)."""
        return CrypTenSecret(fixed.own, fixed.bits)  # type: ignore[attr-defined]

    def fixed_current(self, fixed: Fixed) -> bool:
        return isinstance(fixed, CrypTenFixed) and fixed.link is DealerProvider.link

    def _fixed_group(self, fixed: Sequence[Fixed], op: str) -> tuple[tuple[int, ...], list[int]]:
        """The common shape and the numbers of operands fixed in this session with one scale."""
        if not fixed or not all(self.fixed_current(f) for f in fixed):
            raise ValueError(f"{op} needs operands fixed in this session (fix them again)")
        operand = tuple(fixed[0].shape)
        if any(tuple(f.shape) != operand for f in fixed) or len({f.bits for f in fixed}) != 1:  # type: ignore[attr-defined]
            raise ValueError(f"the fixed operands of one {op} must share their shape and scale")
        return operand, [f.number for f in fixed]  # type: ignore[attr-defined]

    def fixed_dot(self, a: Sequence[Fixed], b: Sequence[Fixed]) -> CrypTenSecret:
        """[a_cᵀb_c] per pair from the openings E and one `dot_fixed` share: no communication
        with the peer (`plane/fixed_beaver.py`), one truncation per scalar product."""
        if len(a) != len(b):
            raise ValueError("fixed_dot takes pairs: as many first as second operands")
        operand, numbers = self._fixed_group([*a, *b], "fixed_dot")
        pairs = [n for i in range(len(a)) for n in (numbers[i], numbers[len(a) + i])]
        self._sync("fixed_dot", operand, pairs)
        c = fixed_dot_share(operand, pairs)
        view = [FixedShares(f.opened, f.own) for f in (*a, *b)]  # type: ignore[attr-defined]
        raw = torch.stack([fixed_dot(self.rank, view[i], view[len(a) + i], c[i]) for i in range(len(a))])
        return self._to_precision(CrypTenSecret(raw, 2 * a[0].bits))  # type: ignore[attr-defined]

    @contextmanager
    def fixed_repeats(self, again: bool) -> Iterator[None]:
        """`Primitives.fixed_repeats`: one round of the caller's; the pairs drawn ahead in the
        last round become this round's (`fixed_prefetch.next_round`), and the session's dealer
        link draws ahead for the next only while `again`."""
        link = session_link()
        next_round(link)
        outer, link.prefetch = link.prefetch, again
        try:
            yield
        finally:
            link.prefetch = outer

    def fixed_matmul(self, x: Secret, fixed: Sequence[Fixed], shape: Sequence[int]) -> CrypTenSecret:
        """x @ reshape(stack(fixed), shape): one `matmul_fixed` pair, one opening of x's size.

        `shape` is (K, m) or, batched, (b, K/b, m): each row of the stacked view is one fixed
        operand flattened (`fixed_layout`). Once F is open the product is accumulated
        into [C]'s buffer one batch entry and one operand row at a time
        (`fixed_beaver.fixed_product`): the operands are never stacked, so the temporaries are
        m-sized (ring arithmetic: the same shares as one batched product)."""
        x = self._check(x)
        operand, numbers = self._fixed_group(fixed, "fixed_matmul")
        batch, per = fixed_layout(len(x.shape), len(fixed), math.prod(operand), shape)
        self._sync("fixed_matmul", *self._sig(x), tuple(shape), numbers)
        a, c = self._fixed_pairs(tuple(x.shape), operand, tuple(shape), numbers, per)
        f = comm.get().all_reduce(x.share - a)
        for b in range(batch):
            rows = fixed[b * per : (b + 1) * per]
            opened = [r.opened.reshape(-1) for r in rows]  # type: ignore[attr-defined]
            own = [r.own.reshape(-1) for r in rows]  # type: ignore[attr-defined]
            part = (slice(b, b + 1),) if batch > 1 else (slice(None),)
            fixed_product(f[part], a[part], c[part], opened, own)
        return self._to_precision(CrypTenSecret(c, x.bits + fixed[0].bits))  # type: ignore[attr-defined]

    @staticmethod
    def _fixed_pairs(
        size: tuple[int, ...], operand: tuple[int, ...], shape: tuple[int, ...], numbers: list[int], per: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(a_p, [a @ B]_p) of a `fixed_matmul`: one `matmul_fixed` pair, or where the fixed rows
        exceed a request block (`mpc.plane.request_blocks`) one pair per group: of batch entries
        for a batch (concatenated along it), of the K rows of a (K, m) product (a @ B is
        Σ_g a_g @ B_g over the row groups g: the a_g concatenated along x's last dimension,
        the [a_g @ B_g] added, m elements each)."""
        if len(shape) == 2:
            rows = item_groups(shape[0], math.prod(operand))
            pairs = [
                fixed_matmul_pair((*size[:-1], len(g)), operand, (len(g), shape[1]), numbers[g.start : g.stop])
                for g in rows
            ]
            return torch.cat([p[0] for p in pairs], dim=-1), sum((p[1] for p in pairs[1:]), pairs[0][1])
        groups = item_groups(shape[0], per * math.prod(operand))
        if len(groups) == 1:
            return fixed_matmul_pair(size, operand, shape, numbers)
        pairs = [
            fixed_matmul_pair((len(g), *size[1:]), operand, (len(g), *shape[1:]), numbers[g.start * per : g.stop * per])
            for g in groups
        ]
        return torch.cat([p[0] for p in pairs]), torch.cat([p[1] for p in pairs])

    # ------------------------------------------------------------------ comparisons
    def _ltz(self, share: torch.Tensor) -> torch.Tensor:
        """Integer-shared bit [x < 0]: the sign bit by the packed carry tree
        (`plane/sign_bit.py`), in chunks."""
        flat = share.reshape(-1)
        out = [
            sign_bits(self.rank, flat[start : start + self.chunk_elements], binary_triple, b2a_bits, _open_xor)
            for start in range(0, flat.numel(), self.chunk_elements)
        ]
        return torch.cat(out).reshape(share.shape) if flat.numel() else share.clone()

    def _ge_zero(self, diff: CrypTenSecret) -> CrypTenSecret:
        ltz = self._ltz(diff.share)
        ones = torch.ones_like(ltz) if self.rank == 0 else torch.zeros_like(ltz)
        return CrypTenSecret(ones - ltz, 0)

    def ge(self, a: Secret, b: Secret | Public) -> CrypTenSecret:
        a = self._check(a)
        self._sync("ge", *self._sig(a, b))
        return self._ge_zero(self.sub(a, b))

    def ge_prod(self, a: Secret, b: Secret | Public, c: Secret | Public, d: Secret | Public) -> CrypTenSecret:
        """[a·b ≥ c·d] on the untruncated products (exact on the fixed-point grid)."""
        a = self._check(a)
        self._sync("ge_prod", *self._sig(a, b, c, d))
        if all(isinstance(z, CrypTenSecret) and z.shape == a.shape for z in (b, c, d)) and b is not a:
            return self._ge_zero(self._paired_products_diff(a, b, c, d))  # type: ignore[arg-type]
        left = self._raw_product("mul", a, b)
        if isinstance(c, Secret):
            right = self._raw_product("mul", self._check(c), d)
        elif isinstance(d, Secret):
            right = self._raw_product("mul", self._check(d), c)
        else:
            enc = self._encode(_to_tensor(c) * _to_tensor(d), left.bits)
            right = CrypTenSecret(enc if self.rank == 0 else torch.zeros_like(enc), left.bits)
        x, y = self._aligned(left, right)
        return self._ge_zero(CrypTenSecret(x.share - y.share, x.bits))

    def _paired_products_diff(
        self, a: CrypTenSecret, b: CrypTenSecret, c: CrypTenSecret, d: CrypTenSecret
    ) -> CrypTenSecret:
        """a·b − c·d untruncated, both products in ONE Beaver round (stacked operands)."""
        x, z = self._aligned(a, c)
        y, w = self._aligned(b, d)
        raw = beaver.mul(self._ast(self.stack([x, z])), self._ast(self.stack([y, w]))).share
        return CrypTenSecret(raw[0] - raw[1], x.bits + y.bits)

    # ------------------------------------------------------------------ division
    def div(self, a: Secret, b: Secret | Public) -> CrypTenSecret:
        a = self._check(a)
        if not isinstance(b, Secret):
            bt = _to_tensor(b)
            if (bt == 0).any():
                raise ZeroDivisionError("division by a public zero")
            return self.mul(a, 1.0 / bt)
        b = self._lift(self._check(b), self.f)
        self._sync("div", *self._sig(a, b))
        with crypten_cfg.temp_override(
            {"functions.reciprocal_all_pos": True, "functions.reciprocal_nr_iters": self.reciprocal_iterations}
        ):
            recip = MPCTensor.from_shares(b.share, precision=self.f).reciprocal()
        r = CrypTenSecret(recip._tensor.share, self.f)
        # CrypTen's step y ← 2y − y²·b loses precision when y² is a few ulp (b ≳ 10);
        # refine with y ← y + y·(1 − b·y), whose residual 1 − b·y is O(1)-scaled
        for _ in range(RECIPROCAL_REFINE_STEPS):
            residual = self.neg(self.sub(self.mul(b, r), 1.0))
            r = self.add(r, self.mul(r, residual))
        return self._to_precision(self._raw_product("mul", a, r))

    def sqrt(self, a: Secret) -> CrypTenSecret:
        """√a: CrypTen's a·(1/√a) (Newton on 1/√a from its exp-based guess, accurate for
        10⁻³ ≤ a ≤ 150), then Heron steps y ← (y + a/y)/2, each halving the relative error's
        exponent, so the result carries the refined division's precision."""
        a = self._lift(self._check(a), self.f)
        self._sync("sqrt", *self._sig(a))
        with crypten_cfg.temp_override({"functions.sqrt_nr_iters": SQRT_ITERATIONS}):
            root = MPCTensor.from_shares(a.share, precision=self.f).sqrt()
        y = CrypTenSecret(root._tensor.share, self.f)
        for _ in range(SQRT_REFINE_STEPS):
            y = self.mul(self.add(y, self.div(a, y)), 0.5)
        return y
