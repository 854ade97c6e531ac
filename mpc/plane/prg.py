"""The pseudorandom generator behind the dealer's correlated randomness: AES-256-CTR.

The dealer draws one 32-byte key per party and session from the OS CSPRNG (`secrets`)
and sends it to that party over TLS. Both the party and the dealer expand the key with
AES-256 in counter mode (the keystream of `cryptography`'s AES-CTR, counter block
starting at zero; a key is used for exactly one session, so the counter never repeats)
and read it as little-endian int64 words: `ring` gives uniform elements of Z_2^64,
`bits(k)` uniform k-bit values (the low k bits of a word). Because both ends consume the
stream in the same order (the protocol's order of requests), they derive the same
values without sending them; the security of the triples rests on AES being a
pseudorandom permutation. This replaces CrypTen's TTP generators (torch's Mersenne
Twister, whose outputs are predictable from a few hundred words).

`derive(label, index)` gives a second, independent stream from the same key: the key
K' = HMAC-SHA256(key, label ‖ index as 8 bytes big-endian), expanded the same way. Both
the party and the dealer can build it at any time without touching the main stream; the
fixed-operand products (`mpc.plane.fixed_beaver`) draw the mask of fixed operand i of
a session from `derive(b"fixed-operand", i)`.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

if TYPE_CHECKING:
    import torch

KEY_BYTES = 32
_ZERO_BLOCK = 1 << 20
_ZEROS = bytes(_ZERO_BLOCK)
"""Keystream is produced by encrypting zeros, this many bytes at a time."""


def new_key() -> bytes:
    """A fresh 256-bit session key from the OS CSPRNG."""
    return secrets.token_bytes(KEY_BYTES)


class Prg:
    """A deterministic stream of ring elements from one 32-byte key (see the module doc)."""

    def __init__(self, key: bytes) -> None:
        if len(key) != KEY_BYTES:
            raise ValueError(f"a PRG key has {KEY_BYTES} bytes, got {len(key)}")
        self._key = key
        self._enc = Cipher(algorithms.AES(key), modes.CTR(bytes(16))).encryptor()
        self.words = 0  #: int64 words drawn so far (both ends must agree on it)

    def derive(self, label: bytes, index: int) -> Prg:
        """The independent stream keyed HMAC-SHA256(key, label ‖ index) (module doc)."""
        if not 0 <= index < 2**63:
            raise ValueError(f"a derived stream's index is in 0..2^63 - 1, got {index}")
        return Prg(hmac.new(self._key, label + index.to_bytes(8, "big"), hashlib.sha256).digest())

    def __repr__(self) -> str:  # never print the key
        return f"Prg(words={self.words})"

    def _words(self, n: int) -> np.ndarray:
        # the keystream is written straight into the result (update_into needs 15 spare bytes)
        out = np.empty(n * 8 + 16, dtype=np.uint8)
        view = memoryview(out)
        done = 0
        while done < n * 8:
            step = min(_ZERO_BLOCK, n * 8 - done)
            self._enc.update_into(_ZEROS if step == _ZERO_BLOCK else _ZEROS[:step], view[done:])
            done += step
        self.words += n
        return out[: n * 8].view("<i8")

    def ring(self, shape: Sequence[int]) -> torch.Tensor:
        """Uniform elements of Z_2^64 as an int64 tensor of `shape`."""
        import torch  # the streams' words are numpy; tensors only for the callers that want them

        n = int(np.prod(shape, dtype=np.int64)) if len(shape) else 1
        return torch.from_numpy(self._words(n)).reshape(tuple(shape))

    def bits(self, shape: Sequence[int], bitlength: int) -> torch.Tensor:
        """Uniform `bitlength`-bit values (0 ≤ v < 2^bitlength), bitlength in 1..64."""
        if not 1 <= bitlength <= 64:
            raise ValueError(f"bitlength must be in 1..64, got {bitlength}")
        words = self.ring(shape)
        return words if bitlength == 64 else words & ((1 << bitlength) - 1)
