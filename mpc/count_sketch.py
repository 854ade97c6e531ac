"""Public count sketches of a vector in Z_2^64: what the upload check of a large model checks
instead of the vector itself (docs/PRIVACY.md "Validated uploads", "The sketched check").

A sketch S has r blocks of k buckets. In block t, coordinate i goes to bucket h_t(i) with sign
s_t(i) ∈ {±1}:

    (S·x)_{t,j} = Σ_{i : h_t(i) = j} s_t(i)·x_i   (mod 2^64).

S is linear, so S·[x]_0 + S·[x]_1 = S·x: each party sketches its own share with no
communication, and the two parties hold shares of y = S·x (length r·k instead of m).

The hash is a shifted-rows hash: x is cut into rows of k coordinates, i = b·k + c (row b,
column c), and row b is rotated by a shift o_t(b) uniform in [0, k):

    h_t(b·k + c) = (c + o_t(b)) mod k.

Two coordinates of one row never share a bucket; two of different rows share one with
probability exactly 1/k. The signs are independent and uniform. Since
E‖S_t·x‖² = ‖x‖² + Σ_{i≠j} E[s_i s_j]·x_i x_j·P(h_i = h_j) = ‖x‖² and
Var ‖S_t·x‖² = 2·Σ_{i≠j} x_i² x_j²·P(h_i = h_j) ≤ 2‖x‖⁴/k, the L2 estimate of Alon, Matias
and Szegedy holds as for the fully random count sketch of Charikar, Chen and Farach-Colton
(it needs only pairwise collisions of probability ≤ 1/k and independent signs); the bounds
the check puts on y follow from this (mpc.input_check, `CheckBounds`). Applying it is a sign
product and one shifted addition of each row: sequential memory, no gather or sort.

The shifts and signs come from AES-256-CTR keyed by the sketch's seed
(`mpc.masks.labelled_words`): under label "sketch-shift:t" one 64-bit word w per row,
o_t(b) = w mod k (k a power of two); under "sketch-sign:t" one bit per coordinate
(little-endian bit i of the stream), s = +1 for a 0 bit, −1 for a 1 bit. The seed is drawn
with `secrets` after the uploads are fixed, so no client can place its coordinates against
the hashing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mpc.masks import labelled_words


@dataclass(frozen=True)
class Block:
    """One block of the sketch: each row's shift and each coordinate's sign."""

    shifts: np.ndarray  #: int64 (rows,): o_t(b) in [0, k)
    signs: np.ndarray  #: int64 (m,): s_t(i) = ±1


@dataclass(frozen=True)
class CountSketch:
    length: int
    buckets: int
    blocks: tuple[Block, ...]

    @classmethod
    def draw(cls, seed: bytes, length: int, sketches: int, buckets: int) -> CountSketch:
        """The sketch of `sketches` blocks of `buckets` (a power of two) for vectors of
        `length`, derived from `seed` (module docstring)."""
        if buckets < 1 or buckets & (buckets - 1):
            raise ValueError(f"a sketch has a power of two of buckets, got {buckets}")
        if sketches < 1 or length < 1:
            raise ValueError(f"a sketch has at least one block and one coordinate, got {sketches} and {length}")
        return cls(length, buckets, tuple(_block(seed, t, length, buckets) for t in range(sketches)))

    @property
    def dim(self) -> int:
        return len(self.blocks) * self.buckets

    def bucket(self, t: int, i: int) -> int:
        """h_t(i)."""
        row, column = divmod(i, self.buckets)
        return (column + int(self.blocks[t].shifts[row])) % self.buckets

    def sign(self, t: int, i: int) -> int:
        """s_t(i)."""
        return int(self.blocks[t].signs[i])

    def apply(self, x: np.ndarray) -> np.ndarray:
        """S·x in Z_2^64 for one int64 vector x (m,): int64 (r·k,), block t at [t·k, (t + 1)·k)."""
        if x.shape != (self.length,):
            raise ValueError(f"the sketch takes vectors of shape ({self.length},), got {x.shape}")
        k = self.buckets
        out = np.empty(self.dim, dtype=np.int64)
        signed = np.empty(self.length, dtype=np.int64)
        rotated = np.zeros(2 * k, dtype=np.int64)  # row b added at [o, o + k), folded mod k after
        with np.errstate(over="ignore"):
            for t, block in enumerate(self.blocks):
                np.multiply(x, block.signs, out=signed)
                rotated[:] = 0
                for row, shift in enumerate(block.shifts.tolist()):
                    part = signed[row * k : (row + 1) * k]
                    rotated[shift : shift + part.size] += part
                np.add(rotated[:k], rotated[k:], out=out[t * k : (t + 1) * k])
        return out


def _block(seed: bytes, t: int, length: int, buckets: int) -> Block:
    rows = -(-length // buckets)
    shifts = labelled_words(seed, b"sketch-shift:%d" % t, rows) & np.int64(buckets - 1)
    stream = labelled_words(seed, b"sketch-sign:%d" % t, -(-length // 64)).view(np.uint8)
    bits = np.unpackbits(stream, bitorder="little")
    signs = 1 - 2 * bits[:length].astype(np.int64)
    return Block(shifts.astype(np.int64), signs)
