"""Numeric headroom of the Stage I aggregate (docs/NUMERICS.md §1).

Each party computes its share of A = Σ_{j∈S} n_j·ḡ_j in Z_2^64 and the reconstruction is
read as a signed int64, so A is exact only while |A| ≤ 2^63 − 1. The parties never see
|g|, but every client encodes with |g| ≤ max_abs (the SDK refuses larger values), so
|ḡ| ≤ ⌈max_abs·2^f⌉ and

    |A| ≤ Σ n_j · ⌈max_abs·2^f⌉ ≤ 2^63 − 1   ⇐   Σ_{j∈S} n_j ≤ B = ⌊(2^63 − 1) / ⌈max_abs·2^f⌉⌋.

B is the round's sample budget (134,217,727 at f = 16, max_abs = 2^20). A party refuses an
upload whose n_j would take the n_j it holds for the round past B; the agreed membership is
a subset of what each party holds, so its Σ n_j stays within B too, and the close checks it
again before aggregating.
"""

from __future__ import annotations

import math
from fractions import Fraction

RING_MAX = 2**63 - 1


def coordinate_bound(precision_bits: int, max_abs: float) -> int:
    """⌈max_abs·2^f⌉: the largest |ḡ| of an encoded coordinate with |g| ≤ max_abs."""
    return math.ceil(Fraction(max_abs) * 2**precision_bits)


def round_sample_budget(precision_bits: int, max_abs: float) -> int:
    """B = ⌊(2^63 − 1) / ⌈max_abs·2^f⌉⌋: the largest Σ n_j for which the aggregate cannot wrap."""
    return RING_MAX // coordinate_bound(precision_bits, max_abs)


def fits(total_samples: int, precision_bits: int, max_abs: float) -> bool:
    """Whether Σ n_j = `total_samples` keeps |Σ n_j·ḡ_j| ≤ 2^63 − 1 for every admissible g."""
    return total_samples <= round_sample_budget(precision_bits, max_abs)


def trim_to_budget(members: dict[str, int], budget: int) -> tuple[dict[str, int], list[str]]:
    """Largest-first removal until Σ n_j ≤ B: (kept members, removed clients). Uploads are checked
    against B as they arrive, so this removes nothing unless that check was bypassed."""
    kept = dict(members)
    removed: list[str] = []
    for client in sorted(members, key=lambda c: (-members[c], c)):
        if sum(kept.values()) <= budget:
            break
        del kept[client]
        removed.append(client)
    return kept, removed
