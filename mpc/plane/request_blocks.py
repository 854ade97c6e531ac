"""How the parties cut a dealer request that grows with the job into blocks.

The dealer refuses a request with more than `max_request_elements` elements in one tensor
(or, for the fixed-operand kinds, in the masks it rebuilds: ids × operand elements;
`dealer_ops.parse`). Requests that grow with n·m — the square pairs of the curvature check's
‖ŷ‖² over n clients' rows, a batch's `matmul_fixed` product, the `dot_fixed` scalar products
of its fixed rows — are therefore sent in blocks of at most `BLOCK_ELEMENTS`:

* elementwise kinds (`square`, `wraps`, `b2a`, and `mul` / `binary` of two equal shapes):
  the flattened tensor in consecutive ranges (`element_ranges`); each block is its own
  request, and the parties concatenate the blocks' shares;
* `matmul_fixed`: consecutive entries of the batch (`item_groups`; the backend opens the
  factor once and multiplies each group by its own pair), or for an unbatched (K, m)
  product consecutive rows of the K, whose pairs' shares of a @ B are added;
* `dot_fixed`: consecutive pairs of ids (`item_groups`), the blocks' shares concatenated.

Every block is fresh correlated randomness drawn in the same order by both parties and the
dealer (the request sequence is a function of the public shapes), so blocked and unblocked
requests give the same ring results. The dealer's `max_request_elements` must be at least
`BLOCK_ELEMENTS` (`mpc.plane.dealer_config` refuses less).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

BLOCK_ELEMENTS = 1 << 24
"""Largest tensor (and rebuilt-mask count) of one dealer request the parties send: 2^24
int64 = 128 MiB, half the dealer's default limit."""


def element_ranges(shape: Sequence[int]) -> list[tuple[int, int]]:
    """[start, stop) ranges of the flattened `shape`, each at most `BLOCK_ELEMENTS` elements."""
    total, block = math.prod(shape), BLOCK_ELEMENTS
    return [(start, min(start + block, total)) for start in range(0, total, block)] or [(0, 0)]


def item_groups(count: int, elements_per_item: int) -> list[range]:
    """Consecutive groups of `count` items, each group's items × `elements_per_item` at most
    `BLOCK_ELEMENTS` (at least one item per group: an item larger than a block goes alone)."""
    per = max(1, BLOCK_ELEMENTS // max(elements_per_item, 1))
    return [range(start, min(start + per, count)) for start in range(0, count, per)] or [range(0)]
