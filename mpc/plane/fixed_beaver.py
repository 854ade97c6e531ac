"""Fixed-operand Beaver products: open a secret operand ONCE, multiply it by fresh secrets many times.

A Beaver matrix product X·Y opens both X − A and Y − B with a fresh triple (A, B, C = A·B).
When the same secret Y (Stage II: a client's L-BFGS rows ŷ, `unlearning.lbfgs.expand`'s
Y·c_y) meets a new small secret X every round, re-opening the large Y − B every round is
the whole online cost. Here Y is *fixed* once and each product opens only X − A_t:

* fix (once per operand and session): the mask B_Y = B_0 + B_1 is drawn by the parties
  themselves — party p's B_p from its derived PRG stream for fixed operand i
  (`mpc.plane.fixed_masks.fixed_mask`, no dealer traffic). Each party sends
  D_p = [Y]_p − B_p; both learn E = D_0 + D_1 = Y − B_Y (one opening of Y, both ways) and
  keep E and Z_p = E·[p = 0] + B_p (so Z_0 + Z_1 = E + B_Y = Y);
* product (per round, fresh secret X): the dealer serves A_t (the parties' a_p from
  their main streams) and [C_t] = [A_t·B_Y] (`matmul_fixed`, which rebuilds B_Y from both
  keys); the parties open only F_t = X − A_t (the size of X) and each computes

      [X·Y]_p = F_t·E·[p = 0] + F_t·[B_Y]_p + [A_t]_p·E + [C_t]_p = F_t·Z_p + [A_t]_p·E + [C_t]_p,

  correct because X·Y = (F_t + A_t)(E + B_Y) = F_t·E + F_t·B_Y + A_t·E + A_t·B_Y.

* scalar product of two fixed operands (no opening at all): with [B_aᵀB_b] from the
  dealer (`dot_fixed`) and [B]_p = Z_p − E·[p = 0],

      [aᵀb]_p = E_aᵀZ_{b,p} + Z_{a,p}ᵀE_b − E_aᵀE_b·[p = 0] + [B_aᵀB_b]_p,

  correct because the sum over p is E_aᵀb + aᵀE_b − E_aᵀE_b + B_aᵀB_b = (E_a + B_a)ᵀ(E_b + B_b).

Security: B_Y is uniform in the ring and masks exactly one opening (E, once per operand
and session: the operand numbers come from a per-session counter and the derived keys
from the session's keys); A_t is fresh every product, so F_t is uniform too; the shares
of C_t are fresh. Both openings are uniformly masked, so nothing new is revealed (as with
an ordinary Beaver triple). Products keep the 2f fractional bits of X·Y; the caller
truncates as for any product. These functions act on this party's int64 ring shares;
`open_all` is the backend's opening (an all-reduce of the shares).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

OpenAll = Callable[[list[torch.Tensor]], list[torch.Tensor]]


@dataclass(frozen=True)
class FixedShares:
    """This party's view of a fixed operand Y: the public E = Y − B_Y and Z_p (Z_0 + Z_1 = Y)."""

    opened: torch.Tensor
    own: torch.Tensor


def fix_operands(
    rank: int, shares: Sequence[torch.Tensor], masks: Sequence[torch.Tensor], open_all: OpenAll
) -> list[FixedShares]:
    """Fix: open E = Y − B_Y for every operand in ONE opening; `masks` are this party's B_p."""
    opened = open_all([y - b for y, b in zip(shares, masks, strict=True)])
    return [FixedShares(e, e + b if rank == 0 else b) for e, b in zip(opened, masks, strict=True)]


def fixed_product(
    f: torch.Tensor, a: torch.Tensor, c: torch.Tensor, opened: Sequence[torch.Tensor], own: Sequence[torch.Tensor]
) -> torch.Tensor:
    """[X·Y]_p = F·Z_p + [A]_p·E + [C]_p given the opened F = X − A (untruncated, ring arithmetic).

    Y is given row by row (row j: E_j and Z_{j,p}, each of Y's last dimension) and the product
    is accumulated into `c` in place, Σ_j F[..., j]·Z_{j,p} + [A]_p[..., j]·E_j: no stacked
    copy of Y and no int64 matrix product (the same ring elements as F·Z_p + [A]_p·E)."""
    for j, (e, z) in enumerate(zip(opened, own, strict=True)):
        c.addcmul_(f[..., j : j + 1], z).addcmul_(a[..., j : j + 1], e)
    return c


def fixed_dot(rank: int, a: FixedShares, b: FixedShares, c: torch.Tensor) -> torch.Tensor:
    """[aᵀb]_p over all elements of two fixed operands, given this party's [B_aᵀB_b] (no opening)."""
    ea, eb = a.opened.reshape(-1), b.opened.reshape(-1)
    total = torch.dot(ea, b.own.reshape(-1)) + torch.dot(a.own.reshape(-1), eb) + c
    return total - torch.dot(ea, eb) if rank == 0 else total
