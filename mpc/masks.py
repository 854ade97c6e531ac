"""Seed-compressed mask shares (an optional transport/storage form of share1 = r).

Additive sharing x̄ = (x̄ − r) + r needs r uniform in Z_2^64. Instead of drawing r
from os.urandom and sending it (8 bytes per coordinate), the client draws a 32-byte key
k from os.urandom and sets

    r = AES-256-CTR_k(counter block IV, 0^{8m}) read as little-endian int64,

the keystream of AES-256 in counter mode from the 16-byte block IV = "starfish-mask-v2"
(incremented as a 128-bit big-endian counter), m words of it. It sends the seed to one
party and x̄ − r to the other (the SDK spreads the roles over clients and rounds). The
party holding the seed expands r whenever it needs its share. Secure under the standard
assumption that AES-256 is a pseudorandom permutation (each key is fresh, so a counter
block is never reused); it halves client uploads and the bytes the parties store (33
bytes instead of 8·m for the seeded share).

A seed is versioned: one generator tag byte, then the key (`SEED_BYTES` = 33). Tag 0x01
is AES-256-CTR as above, the only generator. The retired form — an untagged 32-byte
seed expanded with SHAKE-256 — is refused with `MaskSeedError`, never expanded with a
different generator: the client, party0 and party1 all check a seed with `seed_key`.
"""

from __future__ import annotations

import hashlib
import hmac
import os

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

TAG_AES256_CTR = 0x01
"""Generator tag of AES-256-CTR expansion (the first byte of a seed)."""
KEY_BYTES = 32
SEED_BYTES = 1 + KEY_BYTES
RETIRED_SHAKE_SEED_BYTES = 32
"""Length of the retired untagged SHAKE-256 seed, refused with an explaining message."""
COUNTER_BLOCK = b"starfish-mask-v2"
"""The initial AES-CTR counter block (16 bytes; domain separation from other AES streams)."""
_CHUNK = 1 << 20
_ZEROS = memoryview(bytes(_CHUNK))
"""The keystream is produced by encrypting zeros, this many bytes at a time."""


class MaskSeedError(ValueError):
    """A mask seed of the wrong length, an unknown generator tag, or the retired SHAKE-256 form."""


def new_seed() -> bytes:
    """A fresh seed: the AES-256-CTR tag and a 32-byte key from the OS CSPRNG."""
    return bytes([TAG_AES256_CTR]) + os.urandom(KEY_BYTES)


def seed_key(seed: bytes) -> bytes:
    """The 32-byte AES key of a tagged seed; MaskSeedError for anything else."""
    if len(seed) == RETIRED_SHAKE_SEED_BYTES:
        raise MaskSeedError(
            f"a {RETIRED_SHAKE_SEED_BYTES}-byte mask seed is the retired untagged SHAKE-256 form, which is no "
            f"longer expanded; a seed has {SEED_BYTES} bytes: generator tag 0x{TAG_AES256_CTR:02x} (AES-256-CTR) "
            "then a 32-byte key"
        )
    if len(seed) != SEED_BYTES:
        raise MaskSeedError(f"mask seed must be {SEED_BYTES} bytes (generator tag + 32-byte key), got {len(seed)}")
    if seed[0] != TAG_AES256_CTR:
        raise MaskSeedError(
            f"mask seed has unknown generator tag 0x{seed[0]:02x}; expected 0x{TAG_AES256_CTR:02x} (AES-256-CTR)"
        )
    return bytes(seed[1:])


def expand_mask(seed: bytes, count: int) -> np.ndarray:
    """r = AES-256-CTR keystream of the seed's key from COUNTER_BLOCK, `count` little-endian
    int64 ring elements (a fresh writable array; the keystream is written into it directly)."""
    key = seed_key(seed)
    if count < 0:
        raise ValueError(f"mask length must be >= 0, got {count}")
    total = 8 * count
    enc = Cipher(algorithms.AES(key), modes.CTR(COUNTER_BLOCK)).encryptor()
    out = np.empty(total + 15, dtype=np.uint8)  # update_into needs block size − 1 spare bytes
    view = memoryview(out)
    done = 0
    while done < total:
        step = min(_CHUNK, total - done)
        enc.update_into(_ZEROS[:step], view[done:])
        done += step
    return out[:total].view("<i8")


def labelled_words(seed: bytes, label: bytes, count: int) -> np.ndarray:
    """`count` int64 words of the AES-256-CTR stream keyed by HMAC-SHA256(seed, label): the one
    way a public seed yields independent labelled streams (the upload check's masks and fold
    weights, the count sketch's hashes and signs)."""
    key = hmac.new(seed, label, hashlib.sha256).digest()
    return expand_mask(bytes([TAG_AES256_CTR]) + key, count)


def seeded_share(encoded: np.ndarray) -> tuple[np.ndarray, bytes]:
    """(x̄ − r, seed) with r = expand_mask(seed): one party's share in full, the other's as a seed."""
    arr = np.asarray(encoded)
    if arr.dtype != np.int64:
        raise ValueError(f"expected int64 ring elements, got dtype {arr.dtype}")
    seed = new_seed()
    share = expand_mask(seed, arr.size)
    with np.errstate(over="ignore"):
        np.subtract(arr.reshape(-1), share, out=share)  # r is not needed again: x̄ − r in its buffer
    return share, seed
