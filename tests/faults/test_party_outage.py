"""A party down for 10 s — longer than the SDK's old 6 s retry budget — while 8 clients upload
a 250,000-parameter model: party1 in round 1, party0 in round 2 (SIGKILL, restart after 10 s).

Every client's submit returns only when both parties acknowledged (the SDK retries until the
round's deadline, resending the same sharing), each round commits with all 8 clients, and each
committed model equals plaintext FedAvg of the uploads.
"""

from __future__ import annotations

import threading
import time

import pytest

from helpers.fault_helpers import check_acked_counted, check_models, deployment, gradient, samples
from helpers.stage1_helpers import wait_committed

pytestmark = pytest.mark.timeout(300)
M = 250_000
CLIENTS = [f"c{i}" for i in range(8)]
OUTAGE_S = 10.0


def _round_with_outage(dep, sdks: dict, r: int, victim: int, receipts: dict) -> None:
    view = sdks["c0"].wait_for_round(r - 1, timeout_s=90)
    assert view.round == r
    for sdk in sdks.values():
        sdk.round_state()  # each client has seen the open round (its encoding and deadline)
    dep.kill(victim)
    results: dict = {}

    def upload(client: str) -> None:
        try:
            results[client] = sdks[client].submit(r, gradient(client, r, M), samples(client), view.model_hash)
        except BaseException as exc:  # reported below
            results[client] = exc

    threads = [threading.Thread(target=upload, args=(c,)) for c in CLIENTS]
    for t in threads:
        t.start()
    time.sleep(OUTAGE_S)
    assert all(t.is_alive() for t in threads), "a submit returned while a party was down"
    dep.start(victim)
    for t in threads:
        t.join(120)
    failed = {c: v for c, v in results.items() if isinstance(v, BaseException)}
    assert not failed and len(results) == len(CLIENTS), failed
    receipts.update({(r, c): receipt for c, receipt in results.items()})
    status = wait_committed(dep, r, timeout_s=120)
    assert {m.client_id for m in status.rounds[r - 1].members} == set(CLIENTS)


def test_ten_second_outage_of_either_party_loses_and_corrupts_nothing(tmp_path):
    dep = deployment(tmp_path / "dep", CLIENTS, M, deadline_s=120.0)
    try:
        sdks = {c: dep.client(c) for c in CLIENTS}
        for sdk in sdks.values():
            sdk.register()
        receipts: dict = {}
        _round_with_outage(dep, sdks, 1, victim=1, receipts=receipts)
        _round_with_outage(dep, sdks, 2, victim=0, receipts=receipts)
        check_acked_counted(dep, receipts)
        assert check_models(dep, M) == [1, 2]
        for sdk in sdks.values():
            sdk.close()
    finally:
        dep.stop()
