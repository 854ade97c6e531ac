"""Fault injection: a party killed (SIGKILL) in the middle of a round and restarted —
party1 during round 2, party0 during round 3.

No acknowledged upload is lost (the restarted party still holds exactly the acked
shares), clients blocked on the dead party finish through the SDK's retries, the round
completes with every client, and training continues to the next round.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from harness.local import LocalDeployment
from server.store import Store

from helpers.stage1_helpers import fedavg_step, tolerance, wait_committed

pytestmark = pytest.mark.timeout(480)
LR = 0.2
M = 200
CLIENTS = [f"c{i}" for i in range(5)]


def _grad(cid: str, r: int) -> np.ndarray:
    return np.random.default_rng(1000 * r + int(cid[1:])).normal(size=M)


def _n(cid: str) -> int:
    return 10 + int(cid[1:])


def _round_with_crash(dep, clients: dict, r: int, victim: int) -> None:
    """Three clients are acknowledged, the victim is killed, the last two submit while it is
    down (retrying), the victim restarts; then every acked share must still be there."""
    view = clients["c0"].wait_for_round(r - 1, timeout_s=90)
    assert view.round == r
    acked = {cid: clients[cid].submit(r, _grad(cid, r), _n(cid)) for cid in CLIENTS[:3]}
    dep.kill(victim)
    results: dict = {}

    def late(cid: str) -> None:
        try:
            results[cid] = clients[cid].submit(r, _grad(cid, r), _n(cid), model_hash=view.model_hash)
        except BaseException as exc:  # reported below
            results[cid] = exc

    threads = [threading.Thread(target=late, args=(cid,)) for cid in CLIENTS[3:]]
    for t in threads:
        t.start()
    time.sleep(0.5)  # the late clients are now retrying against the dead party
    dep.start(victim)
    for t in threads:
        t.join(240)
    assert all(not isinstance(v, BaseException) for v in results.values()), results
    store = Store(dep.data_dir(victim), victim, readonly=True)
    for cid, receipt in acked.items():
        assert store.uploads(r)[cid].grad_sha256 == receipt.content_sha256[victim]
    status = wait_committed(dep, r, timeout_s=120)
    assert {m.client_id for m in status.rounds[r - 1].members} == set(CLIENTS)


def test_party_killed_mid_round_loses_no_acked_upload(tmp_path):
    dep = LocalDeployment(
        tmp_path / "dep", clients=CLIENTS, rounds={"deadline_s": 300.0, "poll_s": 0.05, "peer_retry_s": 0.1}
    )
    dep.start()
    try:
        admin = dep.admin()
        admin.start_training("toy", np.zeros(M, dtype=np.float32), LR)
        admin.close()
        clients = {cid: dep.client(cid, retries=12, backoff_s=0.1) for cid in CLIENTS}
        for c in clients.values():
            c.register()
        view = clients["c0"].wait_for_round(0, timeout_s=90)
        for cid, c in clients.items():
            c.submit(view.round, _grad(cid, 1), _n(cid))
        wait_committed(dep, 1)
        _round_with_crash(dep, clients, 2, victim=1)
        _round_with_crash(dep, clients, 3, victim=0)
        view = clients["c0"].wait_for_round(3, timeout_s=90)  # training continues
        assert view.round == 4
        models = [clients["c1"].fetch_model(i).params for i in range(4)]
        for r in range(1, 4):
            expected = fedavg_step(models[r - 1], [(_grad(cid, r), _n(cid)) for cid in CLIENTS], LR)
            assert np.all(np.abs(models[r] - expected) <= tolerance(LR, expected))
        for c in clients.values():
            c.close()
    finally:
        dep.stop()
