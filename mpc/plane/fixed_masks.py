"""The masks of fixed operands (`fixed_mask`) and the dealer's per-session stack of them.

Fixed operand i of a session has the mask B_i = B_{0,i} + B_{1,i}: party p draws B_{p,i}
from its derived stream `prg.derive(FIXED_LABEL, i)` (`mpc.plane.prg`), never from the
main stream (docs/ALGORITHM.md §3, "Fixed-operand products"). The dealer holds both keys
and rebuilds B_i for the kinds that name fixed operands (`mpc.plane.dealer_ops`).

`matmul_fixed` needs the stack (B_i)_{i ∈ ids}: 2·|ids|·|operand| words of AES-CTR
keystream. A steady update-estimation round names the same ids with the same operand
shape in every round, so each dealer session keeps its last stack (`MaskStackCache`) and
serves it again while a request names the same ids and shape. The derived streams are
deterministic functions of the session keys and the id, and drawing a mask advances no
stream the parties share, so a kept stack gives exactly the shares a rebuilt one gives.
Memory bound: one stack per session, |ids|·|operand| ≤ the dealer's
`max_request_elements` (`dealer_ops.parse` refuses more), replaced when a request names
other ids or another shape, dropped when the session ends (`DealerSession`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mpc.plane.prg import Prg

if TYPE_CHECKING:
    import torch

Shape = tuple[int, ...]
FIXED_LABEL = b"fixed-operand"
"""The label of the derived PRG streams that hold the fixed operands' masks."""


def fixed_mask(prg: Prg, index: int, shape: Shape) -> torch.Tensor:
    """B_{p,i}: party p's share of fixed operand i's mask, from its derived stream (module doc)."""
    return prg.derive(FIXED_LABEL, index).ring(shape)


def rebuild_stack(prg0: Prg, prg1: Prg, fixed: tuple[int, ...], operand: Shape) -> torch.Tensor:
    """(B_i)_{i ∈ fixed} = (B_{0,i} + B_{1,i})_i, shape (|fixed|, *operand), from both keys."""
    import torch

    masks = torch.empty((len(fixed), *operand), dtype=torch.long)
    for row, i in enumerate(fixed):  # written in place: one stack, no copies
        torch.add(fixed_mask(prg0, i, operand), fixed_mask(prg1, i, operand), out=masks[row])
    return masks


class MaskStackCache:
    """One session's last rebuilt stack of fixed masks, keyed by its ids and operand shape."""

    def __init__(self) -> None:
        self._key: tuple[tuple[int, ...], Shape] | None = None
        self._stack: torch.Tensor | None = None
        self.rebuilds = 0  #: stacks rebuilt in this session (a kept stack served again counts nothing)

    def stack(self, prg0: Prg, prg1: Prg, fixed: tuple[int, ...], operand: Shape) -> torch.Tensor:
        """The stack for `fixed` and `operand`: the kept one when they match, else rebuilt and kept.

        The caller must not write into it (it is served again)."""
        key = (fixed, operand)
        if self._stack is None or self._key != key:
            self.clear()  # the old stack is released before the new one is built: one at a time
            self._stack, self._key = rebuild_stack(prg0, prg1, fixed, operand), key
            self.rebuilds += 1
        return self._stack

    @property
    def elements(self) -> int:
        """Ring elements held (0 when no stack is kept)."""
        return 0 if self._stack is None else self._stack.numel()

    def clear(self) -> None:
        """Drop the kept stack (a new shape or ids, or the session's end)."""
        self._stack, self._key = None, None
