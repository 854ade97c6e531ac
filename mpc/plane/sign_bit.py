"""The sign bit of additively shared int64 values by a packed carry tree (the core of SecGE).

x = x_0 + x_1 mod 2^64 is shared: party p holds x_p. Its sign bit is

    msb(x) = x_0[63] ⊕ x_1[63] ⊕ c_63,

c_63 being the carry into bit 63 when the low 63 bits of x_0 and x_1 are added. With the
generate and propagate bits g = x_0 ∧ x_1 and p = x_0 ⊕ x_1, the carry out of a bit range
follows from its two halves by the prefix operator (Brent–Kung; CrypTen's `circuit.add`)

    (G, P) = (G_hi ⊕ P_hi ∧ G_lo,  P_hi ∧ P_lo),

so a tree of six levels over the 64 positions of (g ≪ 1, p ≪ 1) — position 0 is (0, 0) —
has c_63 as the G of its root. Values are XOR-shared: p for free (party p's share is x_p),
every ∧ of two shared words by a Beaver AND with a dealer triple (`binary`): the parties open
u ⊕ a and v ⊕ b, and [u ∧ v] = c ⊕ (u⊕a) ∧ b ⊕ a ∧ (v⊕b) ⊕ (u⊕a) ∧ (v⊕b) (the last term by
party 0 only). Level 0 forms g with one AND of whole words. Level k = 1 … 6 combines the
positions (2i, 2i + 1) of w = 2^(7−k)-bit values: each party compacts the even and the odd
bits of its shares of G and P into w/2-bit values (bit selection is linear in XOR shares),
and P_odd ∧ G_even, P_odd ∧ P_even go as one AND (the first alone at the root). A level's
values are held in the smallest integer type that fits them (int32, int16, then one byte),
and the AND runs on that buffer read as int64 words: a bitwise AND does not care how the
bits are grouped, so one 64-bit triple serves two 32-bit values, or eight bytes. Opened per
value and direction: 16 + 16 + 8 + 4 + 4 + 4 + 2 = 54 bytes, where CrypTen's circuit opens
two full words at each of its levels (≈ 200).

The sign bit, one XOR-shared bit per value, becomes an additive share with a dealer bit r
(`b2a`: r XOR-shared and additively shared): the parties open z = msb ⊕ r, packed 64 bits
to a word, and take [msb] = z + (1 − 2z)·[r] (z added by party 0).

Security: every opened word is masked by a fresh uniform triple word or dealer bit, as in
any Beaver AND, so the views are those of CrypTen's A2B; the result is exact (no
probabilistic step). The functions act on this party's raw int64 shares; the callers pass
the dealer's triples and bits and the XOR opening of the session.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import numpy as np
import torch

if sys.byteorder != "little":  # the narrowing below reads the low half of each word
    raise ImportError("mpc.plane.sign_bit assumes a little-endian machine")

Triple = Callable[[torch.Size, torch.Size], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
"""This party's XOR shares (a, b, c = a ∧ b) of int64 words of the given shape (`binary`)."""
BitPair = Callable[[tuple[int, ...]], tuple[torch.Tensor, torch.Tensor]]
"""This party's shares of dealer bits r of the given shape: XOR-shared bits (int64 0/1) and additive shares (`b2a`)."""
OpenXor = Callable[[list[torch.Tensor]], list[torch.Tensor]]
"""The XOR of both parties' int64 shares, for every tensor of the list in one round."""

_MASKS = (
    0x5555555555555555,
    0x3333333333333333,
    0x0F0F0F0F0F0F0F0F,
    0x00FF00FF00FF00FF,
    0x0000FFFF0000FFFF,
    0x00000000FFFFFFFF,
)
"""Bit-compaction masks: after step k the kept bits form groups of 2^k."""
_NARROWER = {torch.int64: torch.int32, torch.int32: torch.int16, torch.int16: torch.uint8}


def sign_bits(rank: int, share: torch.Tensor, triple: Triple, bits: BitPair, open_xor: OpenXor) -> torch.Tensor:
    """This party's additive share (int64, 0/1-valued in sum) of msb(x) for each value of the
    flat int64 `share` — the bit [x < 0] of CrypTen's `_ltz`, in 8 rounds."""
    x = share.reshape(-1)
    g = _and(rank, x if rank == 0 else torch.zeros_like(x), x if rank == 1 else torch.zeros_like(x), triple, open_xor)
    top = ((x >> 63) & 1).to(torch.uint8)  # this party's share of p[63] = x_0[63] ⊕ x_1[63]
    carry = _carry_into_top(rank, g << 1, x << 1, triple, open_xor)
    return _to_additive(rank, carry ^ top, bits, open_xor)


def _carry_into_top(rank: int, g: torch.Tensor, p: torch.Tensor, triple: Triple, open_xor: OpenXor) -> torch.Tensor:
    """G of the root of the prefix tree over the 64 positions of (g, p): one byte per value."""
    width = 64
    while width > 2:
        (g_even, p_even), (g_odd, p_odd) = _halves(torch.stack([g, p]), width)
        both = _and(rank, torch.stack([p_odd, p_odd]), torch.stack([g_even, p_even]), triple, open_xor)
        g, p = g_odd ^ both[0], both[1]
        width //= 2
    (g_even, _), (g_odd, p_odd) = _halves(torch.stack([g, p]), width)
    return g_odd ^ _and(rank, p_odd, g_even, triple, open_xor)


def _halves(values: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The even and the odd bits of each `width`-bit value, compacted to width/2 bits and
    narrowed to the smallest type that holds them (the bytes stay one byte)."""
    even, odd = _compact(values, width), _compact(values >> 1, width)
    narrow = _NARROWER.get(values.dtype)
    if narrow is None or width // 2 > 8 * narrow.itemsize:
        return even, odd
    return _low_halves(even, narrow), _low_halves(odd, narrow)


def _compact(values: torch.Tensor, width: int) -> torch.Tensor:
    """Bits 0, 2, 4, … of each `width`-bit value moved to bits 0, 1, 2, …; the arithmetic shift
    of a signed type is harmless, as the first mask clears the top bit."""
    bits = 8 * values.element_size()
    out = values & _mask(0, bits, values.dtype)
    shift, step = 1, 1
    while 2 * shift < width:
        out = (out | (out >> shift)) & _mask(step, bits, values.dtype)
        shift, step = 2 * shift, step + 1
    return out


def _mask(step: int, bits: int, dtype: torch.dtype) -> int:
    """`_MASKS[step]` cut to `bits` bits, as a scalar of `dtype` (signed types: two's complement)."""
    value = _MASKS[step] & ((1 << bits) - 1)
    signed = dtype != torch.uint8 and value >= 1 << (bits - 1)
    return value - (1 << bits) if signed else value


def _low_halves(values: torch.Tensor, narrow: torch.dtype) -> torch.Tensor:
    """The low half of each value (little-endian: the first of its two halves), as `narrow`."""
    return values.contiguous().view(narrow)[..., 0::2].contiguous()


def _and(rank: int, u: torch.Tensor, v: torch.Tensor, triple: Triple, open_xor: OpenXor) -> torch.Tensor:
    """[u ∧ v] from XOR shares of equal shape and type: one Beaver AND on the buffers read as
    int64 words (the last word padded with zero bytes)."""
    words_u, words_v = _words(u), _words(v)
    a, b, c = triple(words_u.shape, words_u.shape)
    e, d = open_xor([words_u ^ a, words_v ^ b])
    out = c ^ (e & b) ^ (a & d)
    if rank == 0:
        out ^= e & d
    return out.view(u.dtype)[: u.numel()].reshape(u.shape)


def _words(values: torch.Tensor) -> torch.Tensor:
    """The values' bytes as int64 words, zero-padded to a whole word."""
    flat = values.reshape(-1)
    spare = -flat.numel() % (8 // flat.element_size())
    if spare:
        flat = torch.cat([flat, flat.new_zeros(spare)])
    return flat.contiguous().view(torch.int64)


def _to_additive(rank: int, bit: torch.Tensor, bits: BitPair, open_xor: OpenXor) -> torch.Tensor:
    """[b] additively from XOR shares of one bit per value (the low bit of each byte): open
    z = b ⊕ r packed 64 to a word, then [b] = z + (1 − 2z)·[r]."""
    n = bit.numel()
    r_xor, r_add = bits((n,))
    masked = (bit & 1) ^ r_xor.to(torch.uint8)
    packed = torch.from_numpy(np.packbits(masked.numpy(), bitorder="little"))
    (opened,) = open_xor([_words(packed)])
    z = torch.from_numpy(np.unpackbits(opened.view(torch.uint8).numpy(), bitorder="little")[:n]).to(torch.int64)
    out = r_add * (1 - 2 * z)
    if rank == 0:
        out += z
    return out
