"""SecClip and the noised reveal on the plaintext backend: norm bound, direction, noise law."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mpc.dp_noise import csprng_gaussian, keyed_gaussian
from mpc.plain_backend import PlainBackend
from mpc.protocols.secclip import MAX_SQUARED_NORM, clip_margin, ladder_steps

B = PlainBackend()
GRID = 2.0**-16
# row norms from 2^-8 to 2^8 relative to the coordinates' scale; clipping norms 2^-3..2^4
scales = st.integers(-8, 8).map(lambda e: 2.0**e)
clips = st.integers(-3, 4).map(lambda e: 2.0**e)


def rows(seed: int, n: int, m: int, scale_list: list[float]) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, m, generator=gen, dtype=torch.float64)
    x = x * torch.tensor(scale_list[:n], dtype=torch.float64).reshape(n, 1)
    return torch.round(x / GRID) * GRID


@settings(deadline=None, max_examples=60)
@given(st.integers(0, 2**31), st.integers(1, 6), st.integers(1, 50), st.lists(scales, min_size=6, max_size=6), clips)
def test_clip_bounds_norm_and_keeps_direction(seed, n, m, scale_list, clip):
    x = rows(seed, n, m, scale_list)
    got = B.reveal(B.clip_norm(B.share(x), clip))
    norms, clipped_norms = x.norm(dim=1), got.norm(dim=1)
    assert bool((clipped_norms <= clip).all()), (norms, clipped_norms)
    kappa = clip_margin(clip, m)
    expected = torch.minimum(norms, torch.full_like(norms, clip))
    # never more than the margin κ below min(‖x‖, C), and pointing the same way
    assert bool((clipped_norms >= expected * (1 - 2 * kappa)).all())
    for i in range(n):
        if float(norms[i]) > 0:
            cos = float(got[i] @ x[i]) / (float(clipped_norms[i]) * float(norms[i]))
            assert cos > 1 - 1e-9


def test_clip_single_vector_shape_and_zero():
    x = torch.zeros(7, dtype=torch.float64)
    assert torch.equal(B.reveal(B.clip_norm(B.share(x), 1.0)), x)
    y = torch.full((7,), 10.0, dtype=torch.float64)
    assert B.reveal(B.clip_norm(B.share(y), 1.0)).shape == (7,)


def test_ladder_steps_cover_the_ring_and_refuse_bad_norms():
    for clip in (1e-3, 0.5, 1.0, 37.0):
        k = ladder_steps(clip)
        assert clip**2 * 4.0 ** (k + 1) >= MAX_SQUARED_NORM
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="clipping norm"):
            ladder_steps(bad)


def test_reveal_noised_zero_sigma_is_reveal():
    x = torch.randn(50, dtype=torch.float64)
    assert torch.equal(B.reveal_noised(B.share(x), 0.0), x)


def test_keyed_reveal_repeats_its_draw_and_another_key_draws_anew():
    """Stage I's retry safety: a repeated opening under the same key carries the same noise."""
    x = B.share(torch.zeros(2000, dtype=torch.float64))
    first = B.reveal_noised(x, 0.5, noise_key=b"k" * 32)
    assert torch.equal(B.reveal_noised(x, 0.5, noise_key=b"k" * 32), first)
    assert torch.equal(first, keyed_gaussian(b"k" * 32, (2000,), 0.5))
    assert not torch.equal(B.reveal_noised(x, 0.5, noise_key=b"j" * 32), first)
    assert abs(float(first.std()) / 0.5 - 1) < 0.1


@settings(deadline=None, max_examples=10)
@given(st.floats(0.01, 100.0))
def test_noise_has_the_stated_law(sigma):
    noise = csprng_gaussian((20000,), sigma)
    # mean within 5 standard errors, std within 5% (20000 draws: std error of std ≈ 0.5%)
    assert abs(float(noise.mean())) < 5 * sigma / math.sqrt(20000)
    assert abs(float(noise.std()) / sigma - 1) < 0.05


def test_noise_draws_differ_and_refuse_bad_sigma():
    assert not torch.equal(csprng_gaussian((8,), 1.0), csprng_gaussian((8,), 1.0))
    for bad in (-1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="standard deviation"):
            csprng_gaussian((3,), bad)


def test_keyed_noise_is_stable_per_key_and_gaussian():
    key, other = bytes(range(32)), bytes(32)
    a, b = keyed_gaussian(key, (20000,), 3.0), keyed_gaussian(key, (20000,), 3.0)
    assert torch.equal(a, b)  # a retried exchange sends the same draw
    assert not torch.equal(a, keyed_gaussian(other, (20000,), 3.0))
    assert abs(float(a.std()) / 3.0 - 1) < 0.05 and abs(float(a.mean())) < 5 * 3.0 / math.sqrt(20000)
