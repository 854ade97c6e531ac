"""Committed Stage I rounds written straight into a party's store, for the job-runtime tests."""

from __future__ import annotations

import numpy as np

from mpc.fixedpoint import random_ring
from server.store import Store


def commit_round(store: Store, i: int, members: dict[str, int], m: int) -> str:
    """Round i as the coordinator leaves it: opened on round i−1's model, one upload of random ring
    shares (model size `m`) per member with its sample count, closed, the membership recorded and
    G_i = (i, …, i) as the round's output; returns the committed model's hash."""
    previous = store.global_model_hash(i - 1)
    store.open_round(i, previous, deadline=1e12, lr=0.5)
    for c, n in members.items():
        store.put_upload(i, c, n, random_ring(m), random_ring(1), random_ring(1), previous)
    store.set_round_state(i, "closed")
    store.set_membership(i, members)
    store.set_round_output(i, "toy", np.full(m, float(i), dtype=np.float32), 0)
    return store.commit_round(i)
