"""CrypTen's tuple provider backed by the dealer service (`DealerProvider`).

CrypTen's protocols ask `crypten.mpc.get_default_provider()` for Beaver triples, square
pairs, binary triples, wrap counts and B2A bits. During a session that is this provider:
each request maps to a dealer request kind (`mpc.plane.dealer_ops`), the party draws its
local shares from its AES-CTR stream (`mpc.plane.prg`, keyed by the dealer) and party 0
fetches its share of the correlated value from the dealer. It is installed under
CrypTen's "TTP" name (`install`), so `cfg.mpc.provider == "TTP"` means "our dealer";
CrypTen's own TTP client (torch.distributed, Mersenne Twister seeds) is never used.
`fixed_matmul_pair` and `fixed_dot_share` serve the backend's fixed-operand products,
which CrypTen has not (the former prefetches the next round's pair, `mpc.plane.fixed_prefetch`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from mpc.crypten_loader import load_crypten
from mpc.plane.dealer_client import DealerLink
from mpc.plane.dealer_ops import request
from mpc.plane.fixed_prefetch import fixed_matmul_pair as prefetched_pair
from mpc.plane.request_blocks import element_ranges, item_groups

load_crypten()
import crypten.mpc  # noqa: E402
from crypten.mpc.primitives import ArithmeticSharedTensor, BinarySharedTensor  # noqa: E402
from crypten.mpc.provider.provider import TupleProvider  # noqa: E402

_PROVIDERS = "__SUPPORTED_PROVIDERS"  #: CrypTen's provider table in crypten.mpc
ELEMENTWISE = frozenset({"mul", "square", "binary", "wraps", "b2a"})  #: kinds whose V is elementwise in L


class DealerProvider(TupleProvider):
    """Correlated randomness from the dealer link of the open session."""

    NAME = "TTP"
    link: DealerLink | None = None

    def _draw(
        self, kind: str, device: Any, *shapes: Any, fixed: list[int] | None = None
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        """This party's local shares and its share of V for one request; an elementwise
        request larger than a block goes as consecutive blocks (`mpc.plane.request_blocks`)."""
        if device is not None and torch.device(device).type != "cpu":
            raise ValueError("the dealer serves CPU tensors only")
        shapes = tuple(tuple(s) for s in shapes)
        ranges = element_ranges(shapes[0]) if kind in ELEMENTWISE and len(set(shapes)) == 1 else []
        if len(ranges) <= 1:
            return _one_request(kind, shapes, fixed)
        blocks = [_one_request(kind, [(stop - start,)] * len(shapes)) for start, stop in ranges]
        local = [torch.cat([b[0][i] for b in blocks]).reshape(shapes[0]) for i in range(len(shapes))]
        return local, torch.cat([b[1] for b in blocks]).reshape(shapes[0])

    def generate_additive_triple(self, size0, size1, op, device=None, *args, **kwargs):
        """Beaver triple (a, b, c = a∘b) for op ∈ {mul, matmul}."""
        if args or kwargs or op not in ("mul", "matmul"):
            raise ValueError(f"the dealer serves mul and matmul triples, not {op} {args} {kwargs}")
        (a, b), c = self._draw(op, device, size0, size1)
        return tuple(ArithmeticSharedTensor.from_shares(t, precision=0) for t in (a, b, c))

    def square(self, size, device=None):
        """(r, r²)."""
        (r,), r2 = self._draw("square", device, size)
        return ArithmeticSharedTensor.from_shares(r, precision=0), ArithmeticSharedTensor.from_shares(r2, precision=0)

    def generate_binary_triple(self, size0, size1, device=None):
        """XOR-shared (a, b, c = a ∧ b) (`binary_triple`)."""
        return tuple(BinarySharedTensor.from_shares(t) for t in binary_triple(size0, size1, device))

    def wrap_rng(self, size, device=None):
        """(r, θ_r): a random sharing and the number of wraps of its shares."""
        (r,), theta = self._draw("wraps", device, size)
        return (
            ArithmeticSharedTensor.from_shares(r, precision=0),
            ArithmeticSharedTensor.from_shares(theta, precision=0),
        )

    def B2A_rng(self, size, device=None):
        """A random bit shared arithmetically (rA) and in binary (rB) (`b2a_bits`)."""
        bit, arith = b2a_bits(size, device)
        return ArithmeticSharedTensor.from_shares(arith, precision=0), BinarySharedTensor.from_shares(bit)


def fixed_matmul_pair(
    size: tuple[int, ...], operand: tuple[int, ...], view: tuple[int, ...], fixed: list[int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """(a_p, [a @ B]_p) for the fixed operands `fixed` stacked and reshaped to `view`
    (`matmul_fixed`, `mpc.plane.fixed_beaver`): this party's raw int64 shares, from the pair
    prefetched by the previous product when it was for the same request
    (`mpc.plane.fixed_prefetch`)."""
    op, req = request("matmul_fixed", [size, operand, view], fixed)
    return prefetched_pair(session_link(), op, req)


def binary_triple(
    size0: tuple[int, ...], size1: tuple[int, ...], device: Any = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """This party's XOR shares (a, b, c = a ∧ b) of int64 words (`binary`), for CrypTen's
    ANDs and `mpc.plane.sign_bit`."""
    (a, b), c = _INSTANCE._draw("binary", device, size0, size1)
    return a, b, c


def b2a_bits(size: tuple[int, ...], device: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
    """This party's shares of dealer bits r (`b2a`) of shape `size`: XOR-shared (0/1) and
    additive, for CrypTen's B2A and `mpc.plane.sign_bit`."""
    (bit,), arith = _INSTANCE._draw("b2a", device, size)
    return bit, arith


def fixed_dot_share(operand: tuple[int, ...], fixed: list[int]) -> torch.Tensor:
    """[Σ B_i ⊙ B_j] for each pair (i, j) of `fixed` = [i_1, j_1, i_2, j_2, …] (`dot_fixed`),
    in groups of pairs whose rebuilt masks fit a block (`mpc.plane.request_blocks`)."""
    shares = []
    for group in item_groups(len(fixed) // 2, 2 * math.prod(operand)):
        ids = fixed[2 * group.start : 2 * group.stop]
        shares.append(_one_request("dot_fixed", [operand, (len(group),)], ids)[1])
    return torch.cat(shares)


def _one_request(
    kind: str, shapes: Sequence[tuple[int, ...]], fixed: Sequence[int] | None = None
) -> tuple[list[torch.Tensor], torch.Tensor]:
    """One dealer request: this party's local shares (its stream) and its share of V."""
    link = session_link()
    op, req = request(kind, shapes, fixed)
    return op.party_shares(link.prg, link.rank, req, lambda r: link.fetch(r, op.output_shape(r.shapes)))


def session_link() -> DealerLink:
    """The open session's dealer link (its PRG, rank and fixed-operand counter)."""
    link = DealerProvider.link
    if link is None:
        raise RuntimeError("no MPC session is open (the dealer link is missing)")
    return link


def install(link: DealerLink | None) -> None:
    """Make the dealer provider CrypTen's "TTP" provider, serving `link` (None: no session)."""
    vars(crypten.mpc)[_PROVIDERS]["TTP"] = _INSTANCE
    DealerProvider.link = link


_INSTANCE = DealerProvider()
