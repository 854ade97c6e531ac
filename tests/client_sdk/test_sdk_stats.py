"""‖g‖ and the tolerance-rate threshold δ uploaded with each gradient."""

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from client_sdk.stats import clip_to_norm, l2_norm, tolerance_threshold


@settings(max_examples=100, deadline=None)
@given(
    g=arrays(np.float64, st.integers(1, 100), elements=st.floats(-1e3, 1e3), unique=True), alpha=st.floats(0.01, 1.0)
)
def test_fraction_alpha_of_coordinates_exceeds_delta(g, alpha):
    mags = np.abs(g)
    assume(len(np.unique(mags)) == mags.size)  # ties (x and −x) make the count ambiguous
    delta = tolerance_threshold(g, alpha)
    # ⌊α·m⌋ coordinates exceed δ (a zero coordinate never exceeds δ ≥ 0)
    assert int(np.sum(mags > delta)) == min(math.floor(alpha * g.size), int(np.count_nonzero(mags)))


def test_delta_is_a_magnitude_of_g_and_ties_never_exceed_the_fraction():
    g = np.array([0.3, -0.7, 0.1, 0.9], dtype=np.float32)
    assert tolerance_threshold(g, 0.5) in set(np.abs(g).astype(np.float64).tolist())
    tied = np.array([1.0, -1.0, 1.0, 0.5, 0.5, 0.1], dtype=np.float32)
    delta = tolerance_threshold(tied, 0.4)  # ⌊0.4·6⌋ = 2
    assert delta == 1.0 and np.sum(np.abs(tied) > delta) <= 2


def test_norm_and_bad_alpha():
    assert l2_norm(np.array([3.0, -4.0])) == 5.0
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="alpha"):
            tolerance_threshold(np.ones(3), bad)
    with pytest.raises(ValueError, match="empty"):
        tolerance_threshold(np.array([]), 0.4)


@settings(deadline=None, max_examples=50)
@given(st.lists(st.floats(-1e3, 1e3), min_size=1, max_size=40), st.floats(1e-3, 1e3))
def test_clip_to_norm_bounds_the_norm_and_keeps_direction(values, clip):
    g = np.array(values, dtype=np.float32)
    out = clip_to_norm(g, clip)
    assert out.dtype == g.dtype and l2_norm(out) <= clip
    if l2_norm(g) <= clip:
        assert out is g
    else:
        assert np.allclose(out / l2_norm(out), g / l2_norm(g), atol=1e-5)


def test_clip_to_norm_refuses_a_bad_norm():
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="clipping norm"):
            clip_to_norm(np.ones(3), bad)
