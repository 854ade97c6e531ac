"""Client upload side values: norm and tolerance threshold δ (rate α)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from evaluation.uploads import gradient_norm, tolerance_threshold


@settings(max_examples=60, deadline=None)
@given(
    g=arrays(np.float32, st.integers(1, 200), elements=st.floats(-10, 10, width=32), unique=True),
    alpha=st.floats(0.0, 0.99),
)
def test_delta_leaves_exactly_floor_alpha_m_coordinates_above(g: np.ndarray, alpha: float) -> None:
    mags = np.abs(g)
    if len(np.unique(mags)) != len(mags):  # ±x ties in magnitude: the count is only bounded
        return
    delta = tolerance_threshold(g, alpha)
    assert int(np.sum(mags > delta)) == math.floor(alpha * g.size)
    assert delta in set(mags.astype(np.float64).tolist())


def test_delta_with_ties_never_exceeds_the_fraction() -> None:
    g = np.array([1.0, -1.0, 1.0, 0.5, 0.5, 0.1], dtype=np.float32)
    delta = tolerance_threshold(g, 0.4)  # ⌊0.4·6⌋ = 2
    assert delta == 1.0 and np.sum(np.abs(g) > delta) <= 2


def test_norm_and_bad_alpha() -> None:
    assert gradient_norm(np.array([3.0, 4.0], dtype=np.float32)) == 5.0
    with pytest.raises(ValueError, match="tolerance rate"):
        tolerance_threshold(np.ones(3), 1.0)
    with pytest.raises(ValueError, match="empty"):
        tolerance_threshold(np.zeros(0), 0.4)
