"""SecMax: maximum by a tree of SecGE + SecSel (Starfish Appendix B, Table VI:
O(log T) parallel rounds of comparisons, O(T) comparisons in total).

Used for threshold determination (Algorithm 4 step 1: [δ^j] = SecMax_i([δ_i^j])).
Each level compares the first half of the remaining rows with the second half in ONE
comparison call and keeps the larger by one SecSel (exact: selection by a shared bit);
an odd row is carried to the next level.
"""

from __future__ import annotations

from mpc.primitives import Primitives, Secret


def sec_max(backend: Primitives, a: Secret, dim: int = 0) -> Secret:
    """Maximum of `a` along `dim` (the dimension is removed)."""
    ndim = len(a.shape)
    if not -ndim <= dim < ndim:
        raise ValueError(f"dim {dim} out of range for shape {tuple(a.shape)}")
    dim %= ndim
    if a.shape[dim] == 0:
        raise ValueError("SecMax of an empty dimension")
    x = backend.transpose(a, 0, dim) if dim else a
    while x.shape[0] > 1:
        half = x.shape[0] // 2
        first = backend.index(x, slice(0, half))
        second = backend.index(x, slice(half, 2 * half))
        bit = backend.ge(first, second)
        larger = backend.select(bit, first, second)
        if x.shape[0] % 2:
            larger = backend.cat([larger, backend.index(x, slice(2 * half, None))], dim=0)
        x = larger
    top = backend.index(x, 0)
    # transpose(0, dim) left the old dim 0 at position dim − 1 of `top`; rotate it back
    for k in range(dim - 1, 0, -1):
        top = backend.transpose(top, k, k - 1)
    return top
