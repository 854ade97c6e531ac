"""ArrayRecord ↔ flat model vector, and the pseudo-gradient convention of the Flower integration."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from starfish_flower.arrays import flatten, pseudo_gradient, unflatten
from starfish_flower.self_check import flat_evaluate

shapes = st.lists(st.lists(st.integers(1, 4), min_size=0, max_size=3).map(tuple), min_size=1, max_size=4)
finite = st.floats(-1e3, 1e3, allow_nan=False, width=32)


def _record(values: list[np.ndarray]) -> ArrayRecord:
    return ArrayRecord({f"layer{k}": Array(v) for k, v in enumerate(values)})


@settings(max_examples=60, deadline=None)
@given(st.data(), shapes)
def test_unflatten_inverts_flatten_with_keys_shapes_and_order(data, layer_shapes):
    values = [data.draw(arrays(np.float32, shape, elements=finite)) for shape in layer_shapes]
    record = _record(values)
    flat = flatten(record)
    assert flat.dtype == np.float32 and flat.size == sum(v.size for v in values)
    np.testing.assert_array_equal(flat, np.concatenate([v.reshape(-1) for v in values]))
    back = unflatten(flat, record)
    assert list(back.keys()) == list(record.keys())
    for key, value in zip(back.keys(), values, strict=True):
        np.testing.assert_array_equal(back[key].numpy(), value)


@settings(max_examples=60, deadline=None)
@given(arrays(np.float32, 20, elements=finite), arrays(np.float32, 20, elements=finite), st.floats(1e-3, 10.0))
def test_the_parties_update_with_the_pseudo_gradient_gives_the_fitted_model(before, fitted, lr):
    g = pseudo_gradient(before, fitted, lr)
    np.testing.assert_allclose(before - lr * g, fitted, rtol=1e-9, atol=1e-9 * (1 + np.abs(fitted).max()))


def test_integer_arrays_and_size_mismatches_are_refused():
    with pytest.raises(TypeError, match="'steps' has dtype int64"):
        flatten(ArrayRecord({"w": Array(np.zeros(3, np.float32)), "steps": Array(np.zeros(1, np.int64))}))
    template = _record([np.zeros((2, 2), np.float32)])
    with pytest.raises(ValueError, match="5 values, the template 4"):
        unflatten(np.zeros(5, np.float32), template)
    with pytest.raises(ValueError, match="the template needs more"):
        unflatten(np.zeros(3, np.float32), template)
    with pytest.raises(ValueError, match="learning rate must be positive"):
        pseudo_gradient(np.zeros(2), np.zeros(2), 0.0)


def test_flat_evaluate_scores_the_record_the_flat_model_stands_for():
    template = _record([np.zeros((2, 3), np.float32), np.zeros(4, np.float32)])
    seen = []

    def evaluate_arrays(record: ArrayRecord) -> dict[str, float]:
        seen.append([record[k].numpy() for k in record.keys()])
        return {"sum": float(sum(a.sum() for a in seen[-1]))}

    flat = np.arange(10, dtype=np.float32)
    assert flat_evaluate(template, evaluate_arrays)(flat) == {"sum": 45.0}
    np.testing.assert_array_equal(seen[0][0], flat[:6].reshape(2, 3))
    np.testing.assert_array_equal(seen[0][1], flat[6:])
    with pytest.raises(ValueError, match="the template 10"):
        flat_evaluate(template, evaluate_arrays)(np.zeros(11, np.float32))
