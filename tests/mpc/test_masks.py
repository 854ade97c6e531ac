"""Seed-compressed mask shares (mpc/masks.py): AES-256-CTR expansion of a tagged seed."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from mpc.fixedpoint import MAX_ABS_DEFAULT, decode, encode, reconstruct_encoded
from mpc.masks import (
    COUNTER_BLOCK,
    SEED_BYTES,
    TAG_AES256_CTR,
    MaskSeedError,
    expand_mask,
    new_seed,
    seed_key,
    seeded_share,
)

F = 16
keys = st.binary(min_size=32, max_size=32)
finite = st.floats(-MAX_ABS_DEFAULT, MAX_ABS_DEFAULT, allow_nan=False, allow_infinity=False, width=64)
lengths = st.integers(0, 300_000)  # crosses the 1 MiB keystream chunk (131,072 words)


def _seed(key: bytes) -> bytes:
    return bytes([TAG_AES256_CTR]) + key


@settings(max_examples=60, deadline=None)
@given(hnp.arrays(np.float64, st.integers(1, 2_000), elements=finite))
def test_share_pair_reconstructs_the_gradient(g):
    """(x̄ − r, seed): the party holding the seed expands r; the two shares add up to x̄."""
    x = encode(g, F)
    full, seed = seeded_share(x)
    assert len(seed) == SEED_BYTES and seed[0] == TAG_AES256_CTR and full.dtype == np.int64
    assert np.array_equal(reconstruct_encoded(full, expand_mask(seed, g.size)), x)
    assert np.all(np.abs(decode(reconstruct_encoded(full, expand_mask(seed, g.size)), F) - g) <= 2.0 ** -(F + 1))


@settings(max_examples=25, deadline=None)
@given(keys, lengths, lengths)
def test_expansion_is_deterministic_and_a_prefix_of_longer_ones(key, n1, n2):
    seed = _seed(key)
    a, b = expand_mask(seed, n1), expand_mask(seed, n2)
    k = min(n1, n2)
    assert a.shape == (n1,) and a.dtype == np.int64 and np.array_equal(a[:k], b[:k])
    assert np.array_equal(expand_mask(seed, n1), a)


@settings(max_examples=40, deadline=None)
@given(keys, keys)
def test_distinct_seeds_give_distinct_masks(k1, k2):
    assume(k1 != k2)
    a, b = expand_mask(_seed(k1), 64), expand_mask(_seed(k2), 64)
    assert not np.array_equal(a, b)
    assert np.count_nonzero(a == b) <= 1  # 64 independent uniform words: a collision is ~2^-58


@settings(max_examples=10, deadline=None)
@given(keys)
def test_mask_is_the_aes256_ctr_keystream_from_the_documented_counter_block(key):
    """The generator is fixed by the docs: AES-256-CTR from COUNTER_BLOCK, read as little-endian int64."""
    stream = Cipher(algorithms.AES(key), modes.CTR(COUNTER_BLOCK)).encryptor().update(bytes(8 * 1000))
    assert np.array_equal(expand_mask(_seed(key), 1000), np.frombuffer(stream, dtype="<i8"))


def test_mask_words_look_uniform():
    r = expand_mask(new_seed(), 1 << 16).view(np.uint64)
    bits = np.unpackbits(r.view(np.uint8)).reshape(-1, 64).mean(axis=0)
    assert np.all(np.abs(bits - 0.5) < 0.02)  # every bit position near 1/2 (σ ≈ 0.002)
    assert len(np.unique(r)) == r.size


def test_fresh_seeds_are_tagged_and_distinct():
    seeds = {new_seed() for _ in range(64)}
    assert len(seeds) == 64 and all(len(s) == SEED_BYTES and s[0] == TAG_AES256_CTR for s in seeds)
    assert all(seed_key(s) == s[1:] for s in seeds)


def test_retired_shake_seed_is_refused_not_expanded():
    """An untagged 32-byte seed (the retired SHAKE-256 form) must not silently give another mask."""
    old = hashlib.sha256(b"an old seed").digest()
    with pytest.raises(MaskSeedError, match="retired untagged SHAKE-256"):
        expand_mask(old, 10)


@pytest.mark.parametrize(
    "seed, match",
    [
        (bytes([0x02]) + bytes(32), "unknown generator tag 0x02"),
        (bytes([0x00]) + bytes(32), "unknown generator tag 0x00"),
        (bytes([TAG_AES256_CTR]) + bytes(30), "must be 33 bytes"),
        (bytes([TAG_AES256_CTR]) + bytes(33), "must be 33 bytes"),
        (b"", "must be 33 bytes"),
    ],
)
def test_malformed_seeds_are_refused(seed, match):
    with pytest.raises(MaskSeedError, match=match):
        seed_key(seed)
    with pytest.raises(MaskSeedError, match=match):
        expand_mask(seed, 4)


def test_seeded_share_refuses_non_ring_input():
    with pytest.raises(ValueError, match="int64"):
        seeded_share(np.zeros(3, dtype=np.float64))
