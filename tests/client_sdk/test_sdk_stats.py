"""‖g‖ and the tolerance-rate threshold δ uploaded with each gradient."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from client_sdk.stats import l2_norm, tolerance_threshold


@settings(max_examples=100, deadline=None)
@given(
    g=arrays(np.float64, st.integers(1, 100), elements=st.floats(-1e3, 1e3), unique=True), alpha=st.floats(0.01, 1.0)
)
def test_fraction_alpha_of_coordinates_exceeds_delta(g, alpha):
    mags = np.abs(g)
    if len(np.unique(mags)) != mags.size:  # ties (x and −x) make the count ambiguous
        return
    delta = tolerance_threshold(g, alpha)
    # ⌊α·m⌋ coordinates exceed δ (a zero coordinate never exceeds δ ≥ 0)
    assert int(np.sum(mags > delta)) == min(math.floor(alpha * g.size), int(np.count_nonzero(mags)))


def test_norm_and_bad_alpha():
    assert l2_norm(np.array([3.0, -4.0])) == 5.0
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="alpha"):
            tolerance_threshold(np.ones(3), bad)
    with pytest.raises(ValueError, match="empty"):
        tolerance_threshold(np.array([]), 0.4)
