"""Datasets from installed packages and client partitions."""

from __future__ import annotations

import gzip
import io
import os
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evaluation import datasets
from evaluation.datasets import load_dataset
from evaluation.partition import dirichlet_partition, iid_partition, partition


def _assert_partition(parts: list[np.ndarray], n: int) -> None:
    allidx = np.concatenate(parts)
    assert len(allidx) == n, "parts must cover every sample exactly once"
    assert np.array_equal(np.sort(allidx), np.arange(n))


@settings(max_examples=40, deadline=None)
@given(n=st.integers(10, 400), k=st.integers(1, 10), seed=st.integers(0, 2**31))
def test_iid_partition_is_disjoint_covering_and_balanced(n: int, k: int, seed: int) -> None:
    parts = iid_partition(n, k, seed)
    _assert_partition(parts, n)
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1
    assert all(np.array_equal(a, b) for a, b in zip(parts, iid_partition(n, k, seed), strict=True))


@settings(max_examples=30, deadline=None)
@given(k=st.integers(2, 8), beta=st.floats(0.05, 5.0), seed=st.integers(0, 2**31))
def test_dirichlet_partition_is_disjoint_covering_and_reproducible(k: int, beta: float, seed: int) -> None:
    labels = np.repeat(np.arange(10), 40)
    parts = dirichlet_partition(labels, k, beta, seed, min_size=2)
    _assert_partition(parts, len(labels))
    assert min(len(p) for p in parts) >= 2
    again = dirichlet_partition(labels, k, beta, seed, min_size=2)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again, strict=True))


def _label_concentration(labels: np.ndarray, parts: list[np.ndarray]) -> float:
    """Mean over clients of the share of the client's most frequent label."""
    return float(np.mean([np.bincount(labels[p], minlength=10).max() / len(p) for p in parts]))


def test_dirichlet_skew_grows_as_beta_shrinks() -> None:
    labels = np.repeat(np.arange(10), 300)
    skewed = np.mean([_label_concentration(labels, dirichlet_partition(labels, 10, 0.1, s)) for s in range(5)])
    mild = np.mean([_label_concentration(labels, dirichlet_partition(labels, 10, 100.0, s)) for s in range(5)])
    iid = np.mean([_label_concentration(labels, iid_partition(len(labels), 10, s)) for s in range(5)])
    assert skewed > 0.5 > 0.2 > mild
    assert abs(mild - iid) < 0.05
    assert not all(
        np.array_equal(a, b)
        for a, b in zip(dirichlet_partition(labels, 10, 0.1, 0), dirichlet_partition(labels, 10, 0.1, 1), strict=True)
    )


def test_partition_rejects_bad_requests() -> None:
    with pytest.raises(ValueError, match="cannot give"):
        iid_partition(3, 5, 0)
    with pytest.raises(ValueError, match="positive"):
        dirichlet_partition(np.zeros(20, dtype=int), 2, 0.0, 0)
    with pytest.raises(ValueError, match="unknown partition"):
        partition(np.zeros(20, dtype=int), 2, "sorted", 0)


@pytest.mark.parametrize("name, n_train, n_test, side", [("digits", 1438, 359, 8), ("mnist5k", 4000, 1000, 28)])
def test_small_datasets_load_split_and_scale(name: str, n_train: int, n_test: int, side: int) -> None:
    ds = load_dataset(name)
    assert ds.train_x.shape == (n_train, 1, side, side) and ds.test_x.shape == (n_test, 1, side, side)
    assert ds.train_x.dtype == np.float32 and 0.0 <= ds.train_x.min() and ds.train_x.max() == 1.0
    assert set(np.unique(ds.train_y)) == set(range(10)) and set(np.unique(ds.test_y)) == set(range(10))
    # stratified test split: every class within one sample of an even share
    counts = np.bincount(ds.test_y, minlength=10)
    assert counts.max() - counts.min() <= 1


def test_full_mnist_loads_with_the_numpy_only_unpickler() -> None:
    ds = load_dataset("mnist")
    assert ds.train_x.shape == (60000, 1, 28, 28) and ds.test_x.shape == (10000, 1, 28, 28)
    assert np.bincount(ds.test_y).tolist() == [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]


def test_numpy_only_unpickler_refuses_other_callables() -> None:
    class Exploit:
        def __reduce__(self):  # the classic code-execution pickle
            return (os.system, ("echo pwned",))

    with pytest.raises(pickle.UnpicklingError, match="refusing to load"):
        datasets._NumpyOnlyUnpickler(io.BytesIO(pickle.dumps(Exploit()))).load()
    evil = pickle.dumps(print)
    with pytest.raises(pickle.UnpicklingError, match="refusing to load builtins.print"):
        datasets._NumpyOnlyUnpickler(io.BytesIO(evil)).load()
    arr = np.arange(6, dtype=np.float32).reshape(2, 3)
    restored = datasets._NumpyOnlyUnpickler(
        io.BytesIO(gzip.decompress(gzip.compress(pickle.dumps(arr, protocol=4))))
    ).load()
    assert np.array_equal(restored, arr)


def test_unknown_dataset_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown dataset 'cifar'"):
        load_dataset("cifar")
