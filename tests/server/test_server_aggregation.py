"""Property: the Stage I aggregate on shares equals plaintext FedAvg (docs/SERVICE.md, "Round protocol")."""

import tempfile
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mpc.fixedpoint import share
from server.aggregation import fedavg_update, local_aggregate
from server.store import Store

F = 16


@settings(max_examples=15, deadline=None)
@given(
    k=st.integers(1, 5),
    m=st.integers(1, 40),
    seed=st.integers(0, 2**32 - 1),
    scale=st.sampled_from([1e-3, 1.0, 50.0]),
    lr=st.sampled_from([0.01, 0.5]),
)
def test_shared_fedavg_matches_plaintext(k, m, seed, scale, lr):
    rng = np.random.default_rng(seed)
    grads = rng.normal(scale=scale, size=(k, m))
    weights = rng.integers(1, 2000, size=k)
    previous = rng.normal(size=m).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        stores = [Store(Path(tmp) / f"p{p}", p) for p in (0, 1)]
        for s in stores:
            h = s.install_initial_model("toy", previous, lr)
            s.open_round(1, h, 1e12, lr)
        for j in range(k):
            g = share(grads[j], F)
            nrm = share(np.array([np.linalg.norm(grads[j])]), F)
            for p in (0, 1):
                stores[p].put_upload(1, f"c{j}", int(weights[j]), g[p], nrm[p], nrm[p], h)
        members = {f"c{j}": int(weights[j]) for j in range(k)}
        shares = [local_aggregate(s, 1, members, m) for s in stores]
        for s in stores:
            s.close()
    # each party's aggregate alone is a uniformly masked value: it is not the weighted sum
    got = fedavg_update(previous, shares[0], shares[1], int(weights.sum()), lr, F)
    expected = previous.astype(np.float64) - lr * (weights @ grads) / weights.sum()
    # fixed-point error: each coordinate rounded to 2^-f, weighted mean keeps it below 2^-f; then float32
    tol = lr * 2.0**-F + 4 * np.finfo(np.float32).eps * np.maximum(1.0, np.abs(expected))
    assert np.all(np.abs(got - expected) <= tol)
    # the two parties compute bit-identical models from the exchanged shares
    assert np.array_equal(got, fedavg_update(previous, shares[0], shares[1], int(weights.sum()), lr, F))


def test_running_sum_gives_the_same_aggregate_as_reading_the_store(tmp_path):
    """Uploads outside S are subtracted, uploads of S the running sum lacks are read."""
    from mpc.fixedpoint import random_ring
    from server.aggregation import RunningSums

    m = 50
    store = Store(tmp_path / "p", 0)
    h = store.install_initial_model("toy", np.zeros(m, dtype=np.float32), 0.1)
    store.open_round(1, h, 1e12, 0.1)
    weights = {"a": 2, "b": 3, "c": 5, "d": 7}
    shares = {c: random_ring(m) for c in weights}
    for c, n in weights.items():
        store.put_upload(1, c, n, shares[c], random_ring(1), random_ring(1), h)
    running = RunningSums()
    for c in ("a", "b", "d"):  # c was accepted before a restart: not in the running sum
        running.add(1, c, weights[c], shares[c])
    running.add(1, "a", weights["a"], shares["a"])  # a repeated add is ignored
    members = {"a": 2, "c": 5}
    expected = local_aggregate(store, 1, members, m)
    assert np.array_equal(local_aggregate(store, 1, members, m, running), expected)
    with np.errstate(over="ignore"):
        assert np.array_equal(expected, 2 * shares["a"] + 5 * shares["c"])
    running.add(2, "a", 1, shares["a"])  # a newer round drops round 1's sum: back to the store
    assert running.snapshot(1) is None
    assert np.array_equal(local_aggregate(store, 1, members, m, running), expected)
    store.close()
