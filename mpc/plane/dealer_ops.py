"""The dealer's request kinds: what correlated randomness it serves, and how.

Every kind follows one pattern (CrypTen's trusted-third-party scheme with seeded
generators). Each party p draws its "local" random shares L_p from its own PRG stream
(`mpc.plane.prg`, keyed by the dealer). The dealer, holding both keys, draws the same
L_0 and L_1, computes the correlated value V = combine(L_0, L_1), and must split V into
shares V_0 + V_1 (or V_0 ⊕ V_1): party 1 draws V_1 from its stream (`tail`), the dealer
draws the same V_1 and sends party 0 only V_0 = V − V_1 — one tensor per request, the
"offline" traffic. Party 1 never talks to the dealer after receiving its key.

| kind | request | local shares per party | V |
| --- | --- | --- | --- |
| `mul` | shapes a, b | a_p, b_p | a·b (elementwise, broadcast) |
| `matmul` | shapes a, b | a_p, b_p | a @ b |
| `square` | shape | r_p | r² |
| `binary` | shapes a, b | a_p, b_p (64-bit) | a ∧ b (XOR-shared) |
| `wraps` | shape | r_p | θ = number of wraps of r_0 + r_1 |
| `b2a` | shape | bit r_p | r = r_0 ⊕ r_1 as an arithmetic share |
| `matmul_fixed` | shapes a, operand, view; fixed ids | a_p | a @ B, B = the fixed masks |
| `dot_fixed` | shapes operand, (count,); fixed ids i_1, j_1, … | — | (Σ B_{i_c}·B_{j_c})_c, over all elements |
| `private_dot` | shapes (R_b, L_b), b = 1, 2 | α_b (party 0), β_b (party 1) | (Σ_l α_b,rl·β_b,rl)_r, b = 1 then 2 |

`matmul_fixed` serves the fixed-operand Beaver products (`mpc.plane.fixed_beaver`).
Fixed operand i of a session has the mask B_i = B_{0,i} + B_{1,i}, where party p draws
B_{p,i} (shape `operand`) from its derived stream `prg.derive(FIXED_LABEL, i)`
(`mpc.plane.fixed_masks`) — never from the main stream, so fixing an operand needs no
request. The dealer stacks the masks of the listed ids (rebuilt from both keys, or the
session's kept stack when the ids and shape are those of its last request:
`fixed_masks.MaskStackCache`), reshapes the stack to `view` and returns party 0's share
of a @ B; the parties draw only a_p from their main streams. `dot_fixed`
serves the scalar products of fixed operands with each other (`count` pairs of ids): no
local shares, V_c = Σ B_{i_c} ⊙ B_{j_c}. `private_dot` serves the product of two vectors that
each belong to one party (party 0's X, party 1's Y, e.g. the upload check's
`mpc.input_check`): party 0 opens X − α, party 1 opens Y − β, and
X·Y = α·(Y − β) + (X − α)·Y + α·β, so each party needs only its own mask and a share of α·β.
It takes two blocks of rows of different lengths (a check batch's vectors and its scalars),
so one request serves a whole batch; V holds the row products of the first block, then those
of the second.

Sums are in Z_2^64 (int64 arithmetic wraps). A request is a JSON object
{"kind": ..., "shapes": [[...], ...]} (the fixed-operand kinds: also "fixed": [ids]);
`parse` validates it (known kind, right number of shapes, non-negative dimensions, at most
`limit` elements per tensor — for the fixed-operand kinds also the masks the dealer
rebuilds, ids × operand elements — at most `MAX_FIXED` ids, each a non-negative integer,
as many as the shapes call for) before anything is computed. The parties keep every
request within a block (`mpc.plane.request_blocks`) by splitting the large ones.
How to add a kind: docs/DEPLOY.md, "Adding a dealer request kind".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mpc.plane.fixed_masks import MaskStackCache, fixed_mask, rebuild_stack
from mpc.plane.prg import Prg

if TYPE_CHECKING:
    import torch

Shape = tuple[int, ...]
MAX_DIMS = 8
MAX_FIXED = 1 << 16
"""Fixed-operand numbers one request may name."""


class RequestError(ValueError):
    """A request the dealer refuses (unknown kind, bad shapes, too large)."""


@dataclass(frozen=True)
class Request:
    kind: str
    shapes: tuple[Shape, ...]
    fixed: tuple[int, ...] = ()  #: the fixed-operand kinds: the operands' numbers, in the kind's order

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "shapes": [list(s) for s in self.shapes]}
        if self.fixed:
            out["fixed"] = list(self.fixed)
        return out


@dataclass(frozen=True)
class DealerOp:
    """One request kind (see the module doc for the pattern)."""

    kind: str
    n_shapes: int
    local: Callable[[Prg, tuple[Shape, ...]], list[torch.Tensor]]
    output_shape: Callable[[tuple[Shape, ...]], Shape]
    combine: Callable[[list[torch.Tensor], list[torch.Tensor]], torch.Tensor]
    xor: bool = False  #: V is XOR-shared (binary), else additively shared
    tail_bits: int = 64
    #: for kinds that name fixed operands: whether n ids fit the shapes (None: takes none)
    fixed_fit: Callable[[tuple[Shape, ...], int], bool] | None = None
    fixed_operand: int = 0  #: which of the shapes is a fixed operand's (bounds the rebuilt masks)

    def tail(self, prg: Prg, shape: Shape) -> torch.Tensor:
        """Party 1's share of V, drawn from its stream."""
        return prg.ring(shape) if self.tail_bits == 64 else prg.bits(shape, self.tail_bits)

    def dealer_share0(
        self, prg0: Prg, prg1: Prg, request: Request, masks: MaskStackCache | None = None
    ) -> torch.Tensor:
        """Dealer side: V_0 = V − V_1 (or V ⊕ V_1), advancing both streams like the parties.

        `masks`: the session's kept stack of fixed masks (used by `matmul_fixed` only)."""
        value = self.combine(self.local(prg0, request.shapes), self.local(prg1, request.shapes))
        share1 = self.tail(prg1, tuple(value.shape))
        return value ^ share1 if self.xor else value - share1

    def party_shares(
        self, prg: Prg, rank: int, request: Request, fetch: Callable[[Request], torch.Tensor]
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Party side: (local shares, share of V); party 0 fetches V_0 from the dealer."""
        local = self.local(prg, request.shapes)
        shape = self.output_shape(request.shapes)
        return local, fetch(request) if rank == 0 else self.tail(prg, shape)


def _ring_each(prg: Prg, shapes: tuple[Shape, ...]) -> list[torch.Tensor]:
    return [prg.ring(s) for s in shapes]


def _bit(prg: Prg, shapes: tuple[Shape, ...]) -> list[torch.Tensor]:
    return [prg.bits(shapes[0], 1)]


def _broadcast(shapes: tuple[Shape, ...]) -> Shape:
    """The broadcast shape of the first two operands (RuntimeError when they do not broadcast)."""
    import torch

    return tuple(torch.broadcast_shapes(shapes[0], shapes[1]))


def _matmul_shape(a: Shape, b: Shape) -> Shape:
    """The shape of a @ b, found on meta tensors (no memory; RuntimeError when they do not combine)."""
    import torch

    return tuple(torch.matmul(torch.empty(a, device="meta"), torch.empty(b, device="meta")).shape)


def _matmul(first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
    import torch

    return torch.matmul(first, second)


def count_wraps(r0: torch.Tensor, r1: torch.Tensor) -> torch.Tensor:
    """θ with r_0 + r_1 = (r_0 + r_1 mod 2^64) + θ·2^64 over the signed integers."""
    total = r0 + r1
    return ((r0 > 0) & (r1 > 0) & (total < 0)).long() - ((r0 < 0) & (r1 < 0) & (total >= 0)).long()


class FixedMatmulOp(DealerOp):
    """`matmul_fixed`: shapes (a, operand, view); V = a @ reshape(stack_i B_i, view).

    The parties' local shares are a_p only; the dealer takes B = B_0 + B_1 from the session's
    kept stack (`masks`) or rebuilds it from the derived streams, and hands it to `combine`
    as party 0's second local tensor (read only: a kept stack is served again).
    """

    def dealer_share0(
        self, prg0: Prg, prg1: Prg, request: Request, masks: MaskStackCache | None = None
    ) -> torch.Tensor:
        operand, view = request.shapes[1], request.shapes[2]
        if masks is None:
            stack = rebuild_stack(prg0, prg1, request.fixed, operand)
        else:
            stack = masks.stack(prg0, prg1, request.fixed, operand)
        l0, l1 = self.local(prg0, request.shapes), self.local(prg1, request.shapes)
        value = self.combine([l0[0], stack.reshape(view)], l1)
        return value - self.tail(prg1, tuple(value.shape))


class FixedDotOp(DealerOp):
    """`dot_fixed`: shapes (operand, (count,)); V_c = Σ B_{i_c} ⊙ B_{j_c} for the id pairs.

    No local shares; the dealer rebuilds each named mask once and hands `combine` the
    stacked first and second operands of the pairs, flattened to (count, elements).
    """

    def dealer_share0(
        self, prg0: Prg, prg1: Prg, request: Request, masks: MaskStackCache | None = None
    ) -> torch.Tensor:
        import torch

        operand = request.shapes[0]
        masks = {
            i: (fixed_mask(prg0, i, operand) + fixed_mask(prg1, i, operand)).reshape(-1) for i in set(request.fixed)
        }
        firsts = torch.stack([masks[i] for i in request.fixed[::2]])
        seconds = torch.stack([masks[j] for j in request.fixed[1::2]])
        value = self.combine([firsts], [seconds])
        return value - self.tail(prg1, tuple(value.shape))


def _count(shapes: tuple[Shape, ...]) -> Shape:
    if len(shapes[1]) != 1:
        raise RuntimeError(f"the count is a shape of one dimension, got {list(shapes[1])}")
    return shapes[1]


OPS: dict[str, DealerOp] = {}


def register(op: DealerOp) -> DealerOp:
    if op.kind in OPS:
        raise ValueError(f"dealer request kind {op.kind!r} is already registered")
    OPS[op.kind] = op
    return op


register(
    DealerOp(
        "mul",
        2,
        _ring_each,
        _broadcast,
        lambda l0, l1: (l0[0] + l1[0]) * (l0[1] + l1[1]),
    )
)
register(
    DealerOp(
        "matmul",
        2,
        _ring_each,
        lambda s: _matmul_shape(s[0], s[1]),
        lambda l0, l1: _matmul(l0[0] + l1[0], l0[1] + l1[1]),
    )
)
register(DealerOp("square", 1, _ring_each, lambda s: s[0], lambda l0, l1: (l0[0] + l1[0]) * (l0[0] + l1[0])))
register(
    DealerOp(
        "binary",
        2,
        _ring_each,
        _broadcast,
        lambda l0, l1: (l0[0] ^ l1[0]) & (l0[1] ^ l1[1]),
        xor=True,
    )
)
register(DealerOp("wraps", 1, _ring_each, lambda s: s[0], lambda l0, l1: count_wraps(l0[0], l1[0])))
register(DealerOp("b2a", 1, _bit, lambda s: s[0], lambda l0, l1: l0[0] ^ l1[0]))
register(
    FixedMatmulOp(
        "matmul_fixed",
        3,
        lambda prg, shapes: [prg.ring(shapes[0])],
        lambda s: _matmul_shape(s[0], s[2]),
        lambda l0, l1: _matmul(l0[0] + l1[0], l0[1]),  # l0[1] = B, rebuilt by the dealer
        fixed_fit=lambda s, n: n * _elements(s[1]) == _elements(s[2]),
        fixed_operand=1,
    )
)
register(
    FixedDotOp(
        "dot_fixed",
        2,
        lambda prg, shapes: [],
        _count,
        lambda firsts, seconds: (firsts[0] * seconds[0]).sum(1),
        fixed_fit=lambda s, n: n == 2 * _elements(s[1]),
    )
)
register(
    DealerOp(
        "private_dot",
        2,
        _ring_each,
        lambda s: (_rows(s[0]) + _rows(s[1]),),
        lambda l0, l1: _row_products(l0, l1),
    )
)


def _rows(shape: Shape) -> int:
    if len(shape) != 2:
        raise RuntimeError(f"private_dot takes shapes (rows, length), got {list(shape)}")
    return shape[0]


def _row_products(firsts: list[torch.Tensor], seconds: list[torch.Tensor]) -> torch.Tensor:
    """(Σ_l A_rl·B_rl)_r of each block, the blocks' rows one after the other (numpy's einsum on
    the int64 words: the same wrapping sums as torch's, without the product's temporary)."""
    import numpy as np
    import torch

    rows = [np.einsum("rl,rl->r", a.numpy(), b.numpy()) for a, b in zip(firsts, seconds, strict=True)]
    return torch.from_numpy(np.concatenate(rows))


def _shape(value: Any) -> Shape:
    if not isinstance(value, list | tuple) or len(value) > MAX_DIMS:
        raise RequestError(f"a shape is a list of at most {MAX_DIMS} dimensions, got {value!r}")
    if not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 2**40 for d in value):
        raise RequestError(f"dimensions must be non-negative integers, got {value!r}")
    return tuple(int(d) for d in value)


def _elements(shape: Shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def parse(message: dict[str, Any], limit: int) -> tuple[DealerOp, Request]:
    """Validate a request: known kind, shapes that combine, at most `limit` elements per tensor."""
    op = OPS.get(message.get("kind"))  # type: ignore[arg-type]
    if op is None:
        raise RequestError(f"unknown request kind {message.get('kind')!r}; known: {sorted(OPS)}")
    raw = message.get("shapes")
    if not isinstance(raw, list) or len(raw) != op.n_shapes:
        raise RequestError(f"{op.kind} takes {op.n_shapes} shape(s), got {raw!r}")
    shapes = tuple(_shape(s) for s in raw)
    fixed = _fixed_ids(op, message.get("fixed"))
    try:
        out = op.output_shape(shapes)
    except RuntimeError as exc:
        raise RequestError(f"{op.kind}: shapes {[list(s) for s in shapes]} do not combine: {exc}") from None
    largest = max(_elements(s) for s in (*shapes, out))
    if largest > limit:
        raise RequestError(f"{op.kind}: {largest} elements exceed this dealer's limit of {limit} per tensor")
    if op.fixed_fit is not None and not op.fixed_fit(shapes, len(fixed)):
        raise RequestError(f"{op.kind}: {len(fixed)} fixed operands do not fit shapes {[list(s) for s in shapes]}")
    masks = len(fixed) * _elements(shapes[op.fixed_operand])
    if masks > limit:
        raise RequestError(f"{op.kind}: {masks} elements of rebuilt masks exceed this dealer's limit of {limit}")
    return op, Request(op.kind, shapes, fixed)


def _fixed_ids(op: DealerOp, raw: Any) -> tuple[int, ...]:
    """The fixed operands' numbers of a request: only for kinds that take them, 1..MAX_FIXED of them."""
    if op.fixed_fit is None:
        if raw is not None:
            raise RequestError(f"{op.kind} takes no fixed operands")
        return ()
    if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_FIXED:
        raise RequestError(f"{op.kind} takes a list of 1 to {MAX_FIXED} fixed operand numbers, got {raw!r}")
    if not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < 2**63 for i in raw):
        raise RequestError(f"fixed operand numbers must be non-negative integers, got {raw!r}")
    return tuple(int(i) for i in raw)


def request(kind: str, shapes: Sequence[Sequence[int]], fixed: Sequence[int] | None = None) -> tuple[DealerOp, Request]:
    """The party side's request object (no size limit: the dealer enforces its own)."""
    message: dict[str, Any] = {"kind": kind, "shapes": [list(s) for s in shapes]}
    if fixed is not None:
        message["fixed"] = [int(i) for i in fixed]
    return parse(message, limit=1 << 62)
