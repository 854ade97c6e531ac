"""Plaintext reference backend: secrets are float64 torch tensors held in the clear.

Used for fast experiments and as the ground truth the CrypTen backend must match.
It implements only the primitives; the composite protocols of `mpc/protocols/` run
on top of them exactly as they do under 2PC, so orders, selections and flags agree.

It stands for both parties at once: a public agreement (`all_gather`) sees the same
values on both sides, and its "share" of a value is the whole fixed-point encoding
x̄ = round(x·2^f) (the other party's share being 0), so stored shares load and export
through the same calls as under 2PC.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from mpc.backend import Backend, Public, Secret
from mpc.dp_noise import keyed_gaussian, party_gaussian
from mpc.fixedpoint import DEFAULT_PRECISION_BITS
from mpc.primitives import Fixed, Prepared, fixed_layout


class _Held:
    """A float64 tensor held in the clear: what the plaintext backend's handles are."""

    __slots__ = ("value",)

    def __init__(self, value: torch.Tensor) -> None:
        self.value = value

    @property
    def shape(self) -> torch.Size:
        return self.value.shape


class PlainSecret(_Held, Secret):
    """A 'secret' that is just a float64 tensor (reference semantics)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"PlainSecret(shape={tuple(self.value.shape)})"


class PlainFixed(_Held, Fixed):
    """A fixed operand: the float64 tensor itself (nothing to open)."""

    __slots__ = ()


def _val(x: Secret | Public) -> torch.Tensor | float | int:
    if isinstance(x, PlainSecret):
        return x.value
    if isinstance(x, Secret):
        raise TypeError(f"PlainBackend cannot operate on {type(x).__name__}")
    if isinstance(x, Prepared):
        return x.value
    if isinstance(x, torch.Tensor):
        return x.to(torch.float64)
    return x


class PlainBackend(Backend):
    """Reference implementation of `Backend` in float64."""

    name = "plain"
    is_secure = False

    def share(self, x: torch.Tensor, src: int = 0) -> PlainSecret:
        return PlainSecret(torch.as_tensor(x).to(torch.float64).clone())

    def reveal(self, x: Secret) -> torch.Tensor:
        return _val(x).clone()  # type: ignore[union-attr]

    def reveal_noised(self, x: Secret, sigma: float, noise_key: bytes | None = None) -> torch.Tensor:
        """x + N(0, σ²) from the OS CSPRNG or keyed by `noise_key` (one draw: this backend
        stands for both parties)."""
        value = _val(x).clone()  # type: ignore[union-attr]
        return value + party_gaussian(tuple(value.shape), sigma, noise_key)

    def load_shares(self, share: np.ndarray | torch.Tensor, precision_bits: int | None = None) -> PlainSecret:
        """The value x̄ / 2^f of a whole encoding x̄ (int64)."""
        t = torch.from_numpy(np.ascontiguousarray(share)) if isinstance(share, np.ndarray) else share
        if t.dtype != torch.long:
            raise TypeError(f"shares must be int64, got {t.dtype}")
        bits = DEFAULT_PRECISION_BITS if precision_bits is None else precision_bits
        return PlainSecret(t.to(torch.float64) / float(2**bits))

    def export_shares(self, x: Secret) -> tuple[np.ndarray, int]:
        """The whole encoding x̄ = round(x·2^f) as int64, with f = DEFAULT_PRECISION_BITS."""
        value = torch.as_tensor(_val(x), dtype=torch.float64)
        if not torch.isfinite(value).all():
            raise ValueError("cannot export a non-finite value as a fixed-point share")
        encoded = torch.round(value * float(2**DEFAULT_PRECISION_BITS)).to(torch.long)
        return encoded.numpy(), DEFAULT_PRECISION_BITS

    def all_gather(self, values: Sequence[int]) -> list[list[int]]:
        """Both parties are this process: each holds the same public values."""
        mine = [int(v) for v in values]
        return [mine, list(mine)]

    def zeros(self, shape: Sequence[int]) -> PlainSecret:
        return PlainSecret(torch.zeros(tuple(shape), dtype=torch.float64))

    def add(self, a: Secret, b: Secret | Public) -> PlainSecret:
        return PlainSecret(_val(a) + _val(b))

    def sub(self, a: Secret, b: Secret | Public) -> PlainSecret:
        return PlainSecret(_val(a) - _val(b))

    def neg(self, a: Secret) -> PlainSecret:
        return PlainSecret(-_val(a))

    def mul(self, a: Secret, b: Secret | Public) -> PlainSecret:
        return PlainSecret(_val(a) * _val(b))

    def matmul(self, a: Secret | torch.Tensor, b: Secret | torch.Tensor) -> PlainSecret:
        return PlainSecret(torch.matmul(_val(a), _val(b)))  # type: ignore[arg-type]

    def fix(self, items: Sequence[Secret]) -> list[Fixed]:
        """Keep each tensor (no session, nothing opened)."""
        return [PlainFixed(_val(y)) for y in items]  # type: ignore[arg-type]

    def fixed_secret(self, fixed: Fixed) -> PlainSecret:
        return PlainSecret(fixed.value)  # type: ignore[attr-defined]

    def fixed_current(self, fixed: Fixed) -> bool:
        return isinstance(fixed, PlainFixed)

    def fixed_matmul(self, x: Secret, fixed: Sequence[Fixed], shape: Sequence[int]) -> PlainSecret:
        """A plain matmul with the stacked operands."""
        if not all(isinstance(f, PlainFixed) for f in fixed):
            raise TypeError("PlainBackend multiplies only its own fixed operands")
        fixed_layout(len(x.shape), len(fixed), fixed[0].value.numel(), shape)  # type: ignore[attr-defined]
        y = torch.stack([f.value for f in fixed]).reshape(tuple(shape))  # type: ignore[attr-defined]
        return PlainSecret(torch.matmul(_val(x), y))  # type: ignore[arg-type]

    def fixed_dot(self, a: Sequence[Fixed], b: Sequence[Fixed]) -> PlainSecret:
        """Σ a_c·b_c over all elements, per pair."""
        if not all(isinstance(f, PlainFixed) for f in (*a, *b)):
            raise TypeError("PlainBackend multiplies only its own fixed operands")
        dots = [(x.value * y.value).sum() for x, y in zip(a, b, strict=True)]  # type: ignore[attr-defined]
        return PlainSecret(torch.stack(dots) if dots else torch.zeros(0, dtype=torch.float64))

    def sum(self, a: Secret, dim: int | None = None) -> PlainSecret:
        v = _val(a)
        return PlainSecret(v.sum() if dim is None else v.sum(dim))  # type: ignore[union-attr]

    def stack(self, items: Sequence[Secret], dim: int = 0) -> PlainSecret:
        return PlainSecret(torch.stack([_val(i) for i in items], dim))  # type: ignore[misc]

    def cat(self, items: Sequence[Secret], dim: int = 0) -> PlainSecret:
        return PlainSecret(torch.cat([_val(i) for i in items], dim))  # type: ignore[misc]

    def index(self, a: Secret, key: Any) -> PlainSecret:
        return PlainSecret(_val(a)[key])  # type: ignore[index]

    def reshape(self, a: Secret, shape: Sequence[int]) -> PlainSecret:
        return PlainSecret(_val(a).reshape(tuple(shape)))  # type: ignore[union-attr]

    def transpose(self, a: Secret, dim0: int = 0, dim1: int = 1) -> PlainSecret:
        return PlainSecret(_val(a).transpose(dim0, dim1))  # type: ignore[union-attr]

    def ge(self, a: Secret, b: Secret | Public) -> PlainSecret:
        return PlainSecret((_val(a) >= _val(b)).to(torch.float64))  # type: ignore[operator]

    def div(self, a: Secret, b: Secret | Public) -> PlainSecret:
        return PlainSecret(_val(a) / _val(b))  # type: ignore[operator]

    def sqrt(self, a: Secret) -> PlainSecret:
        return PlainSecret(torch.sqrt(_val(a).clamp_min(0.0)))  # type: ignore[union-attr]

    def random(self, shape: Sequence[int]) -> PlainSecret:
        """Gaussian entries from a generator seeded by the OS CSPRNG (SecMI's mask R)."""
        gen = torch.Generator().manual_seed(int.from_bytes(os.urandom(8), "little") >> 1)
        return PlainSecret(torch.randn(tuple(shape), generator=gen, dtype=torch.float64))

    def keyed_random(self, shape: Sequence[int], key: bytes) -> PlainSecret:
        """N(0, I) from the keyed AES-CTR stream of `key` (this backend stands for both parties)."""
        return PlainSecret(keyed_gaussian(key, tuple(shape), 1.0))

    def select(self, bit: Secret, a: Secret | Public, b: Secret | Public) -> PlainSecret:
        """SecSel as an exact choice (bit·a + (1 − bit)·b would round in float64)."""
        return PlainSecret(torch.where(_val(bit) > 0.5, _val(a), _val(b)))  # type: ignore[arg-type]
