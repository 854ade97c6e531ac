"""Public count sketches of a vector in Z_2^64: what the upload check of a large model checks
instead of the vector itself (docs/PRIVACY.md "Validated uploads", "The sketched check").

A sketch S has r blocks of k buckets. In block t, coordinate i goes to bucket h_t(i) with sign
s_t(i) ∈ {±1}:

    (S·x)_{t,j} = Σ_{i : h_t(i) = j} s_t(i)·x_i   (mod 2^64).

S is linear, so S·[x]_0 + S·[x]_1 = S·x: each party sketches its own share with no
communication, and the two parties hold shares of y = S·x (length r·k instead of m).
E‖S_t·x‖² = ‖x‖² with Var ≤ 2‖x‖⁴/k per block (the count sketch of Charikar, Chen and
Farach-Colton; the L2 estimate of Alon, Matias and Szegedy); the bounds the check puts on y
follow from this (mpc.input_check, `CheckBounds`).

h and s come from AES-256-CTR keyed by the sketch's seed (`mpc.masks.labelled_words`): one
64-bit word w per coordinate and block, h = w mod k (k a power of two), s = +1 if bit 32 of w
is 0 else −1. The seed is drawn with `secrets` after the uploads are fixed, so no client can
place its coordinates against the hashing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mpc.masks import labelled_words

SIGN_BIT = 32
MAX_BUCKETS = 1 << 16
"""Bucket indices are sorted as uint16 (a linear-time radix sort)."""


@dataclass(frozen=True)
class Block:
    """One block of the sketch, laid out for a gather and a segmented sum."""

    order: np.ndarray  #: int64 (m,): coordinates sorted by bucket
    signs: np.ndarray  #: int64 (m,): s(i) in that order
    starts: np.ndarray  #: int64: where each non-empty bucket's run starts in `order`
    filled: np.ndarray  #: int64: the non-empty buckets, in the same order as `starts`


@dataclass(frozen=True)
class CountSketch:
    buckets: int
    blocks: tuple[Block, ...]

    @classmethod
    def draw(cls, seed: bytes, length: int, sketches: int, buckets: int) -> CountSketch:
        """The sketch of `sketches` blocks of `buckets` (a power of two ≤ 2^16) for vectors of
        `length`, derived from `seed` (block t under HMAC-SHA256(seed, "sketch:t"))."""
        if buckets < 1 or buckets > MAX_BUCKETS or buckets & (buckets - 1):
            raise ValueError(f"a sketch has a power of two of buckets up to {MAX_BUCKETS}, got {buckets}")
        if sketches < 1 or length < 1:
            raise ValueError(f"a sketch has at least one block and one coordinate, got {sketches} and {length}")
        return cls(buckets, tuple(_block(seed, t, length, buckets) for t in range(sketches)))

    @property
    def dim(self) -> int:
        return len(self.blocks) * self.buckets

    def apply(self, x: np.ndarray) -> np.ndarray:
        """S·x in Z_2^64 for one int64 vector x (m,): int64 (r·k,), block t at [t·k, (t + 1)·k)."""
        out = np.zeros(self.dim, dtype=np.int64)
        with np.errstate(over="ignore"):
            for t, block in enumerate(self.blocks):
                gathered = x[block.order]
                gathered *= block.signs
                out[t * self.buckets + block.filled] = np.add.reduceat(gathered, block.starts)
        return out


def _block(seed: bytes, t: int, length: int, buckets: int) -> Block:
    words = labelled_words(seed, b"sketch:%d" % t, length).view(np.uint64)
    bucket = (words & np.uint64(buckets - 1)).astype(np.uint16)
    order = np.argsort(bucket, kind="stable")
    signs = 1 - 2 * ((words[order] >> np.uint64(SIGN_BIT)) & np.uint64(1)).astype(np.int64)
    counts = np.bincount(bucket, minlength=buckets)
    filled = np.flatnonzero(counts)
    starts = np.concatenate(([0], np.cumsum(counts[filled])[:-1])).astype(np.int64)
    return Block(order.astype(np.int64), signs, starts, filled.astype(np.int64))
