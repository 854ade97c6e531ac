"""The numpy fixed-point codec and client-side sharing (mpc/fixedpoint.py)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from mpc.fixedpoint import (
    DEFAULT_PRECISION_BITS,
    MAX_ABS_DEFAULT,
    EncodingError,
    decode,
    encode,
    from_wire,
    random_ring,
    reconstruct,
    reconstruct_encoded,
    share,
    to_wire,
)

F = DEFAULT_PRECISION_BITS
finite = st.floats(-MAX_ABS_DEFAULT, MAX_ABS_DEFAULT, allow_nan=False, allow_infinity=False, width=64)


@given(hnp.arrays(np.float64, hnp.array_shapes(max_dims=3, max_side=6), elements=finite))
def test_roundtrip_within_half_ulp(x):
    s0, s1 = share(x)
    assert s0.dtype == s1.dtype == np.int64
    assert np.all(np.abs(reconstruct(s0, s1) - x) <= 2.0 ** -(F + 1))


@given(st.integers(-(2**35), 2**35))
def test_negative_values_decode_exactly(k):
    # grid values (including every negative one) come back bit for bit
    x = np.array([k * 2.0**-F, -abs(k) * 2.0**-F])
    s0, s1 = share(x)
    assert np.array_equal(reconstruct(s0, s1), x)


def test_known_negative_decodes_exactly():
    x = np.array([-1.0, -0.5, -(2.0**-F), -16.0 + 2.0**-F, -1e-3])
    assert np.array_equal(decode(encode(x)), np.rint(x * 2**F) / 2**F)


@pytest.mark.parametrize("bad", [np.array([np.nan]), np.array([1.0, np.inf]), np.array([-np.inf])])
def test_non_finite_rejected(bad):
    with pytest.raises(EncodingError, match="non-finite"):
        share(bad)


def test_out_of_range_rejected():
    with pytest.raises(EncodingError, match="exceeds"):
        encode(np.array([MAX_ABS_DEFAULT * 1.01]))
    with pytest.raises(EncodingError, match="exceeds"):
        encode(np.array([0.5]), max_abs=0.25)


@pytest.mark.parametrize("bad", [np.array([1, 2, 3]), np.array([True]), np.array(["1.0"])])
def test_wrong_dtype_rejected(bad):
    with pytest.raises(EncodingError, match="floating-point"):
        encode(bad)


def test_decode_and_reconstruct_require_int64():
    with pytest.raises(EncodingError, match="int64"):
        decode(np.array([1.0]))
    with pytest.raises(EncodingError, match="int64"):
        reconstruct_encoded(np.array([1], dtype=np.int32), np.array([1], dtype=np.int64))
    with pytest.raises(EncodingError, match="shapes"):
        reconstruct_encoded(np.zeros(2, dtype=np.int64), np.zeros(3, dtype=np.int64))


@pytest.mark.parametrize("precision", [-1, 41, 1.5])
def test_bad_precision_rejected(precision):
    with pytest.raises(EncodingError, match="precision"):
        encode(np.array([1.0]), precision=precision)


def test_wire_roundtrip_and_length_check():
    s0, _ = share(np.linspace(-3, 3, 12).reshape(3, 4))
    assert np.array_equal(from_wire(to_wire(s0), (3, 4)), s0)
    with pytest.raises(EncodingError, match="bytes"):
        from_wire(to_wire(s0)[:-1], (3, 4))
    with pytest.raises(EncodingError, match="int64"):
        to_wire(np.zeros(3, dtype=np.float64))


def test_mask_bits_are_uniform():
    bits = np.unpackbits(random_ring(4096).view(np.uint8))
    # 262,144 bits: mean 0.5 ± 5σ (σ ≈ 0.001)
    assert abs(bits.mean() - 0.5) < 0.005
    assert not np.array_equal(random_ring(8), random_ring(8))


def test_single_share_is_independent_of_the_value():
    # share1 is the mask itself; share0 = x̄ − r. For two very different secrets the
    # distribution of either share alone is the same (uniform), and a share is
    # uncorrelated with the value it hides.
    n = 20000
    values = np.where(np.arange(n) % 2 == 0, 1000.0, -0.001)
    s0, s1 = share(values)
    for s in (s0, s1):
        top = (s.view(np.uint64) >> np.uint64(32)).astype(np.float64) / 2**32  # uniform in [0, 1)
        corr = np.corrcoef(top, values)[0, 1]
        assert abs(corr) < 0.05
        for group in (top[::2], top[1::2]):
            assert abs(group.mean() - 0.5) < 0.02 and abs(group.var() - 1 / 12) < 0.01
