"""A party that returns does not cut off clients still retrying, and a graceful stop is a retry.

* party0 is down past the round's deadline while five of eight clients upload (party1 acknowledges,
  party0 is retried); three had uploaded to both before. When party0 returns, the round does not
  close at once with the three consistent pairs: it waits `rounds.recovery_grace_s`, the five
  retries land, and all eight are counted.
* a party is stopped gracefully (SIGTERM) while ten clients upload a 300,000-parameter model and
  restarted a second later: every submit returns with both acknowledgements (calls cut off in
  flight are CANCELLED or UNAVAILABLE, both retried), and the round counts all ten.
"""

from __future__ import annotations

import threading
import time

import pytest

from helpers.fault_helpers import check_acked_counted, check_models, deployment, receipts_of, submit_threads
from helpers.stage1_helpers import wait_committed

pytestmark = pytest.mark.timeout(300)


def test_a_returning_party0_waits_for_clients_still_retrying(tmp_path):
    m, clients = 1_000, [f"c{i}" for i in range(8)]
    dep = deployment(tmp_path / "dep", clients, m, deadline_s=6.0, recovery_grace_s=10.0)
    try:
        sdks = {c: dep.client(c) for c in clients}
        for sdk in sdks.values():
            sdk.register()
        view = sdks["c0"].wait_for_round(0, timeout_s=60)
        early, late = clients[:3], clients[3:]
        receipts = receipts_of(*submit_threads(sdks, early, 1, m, view.model_hash), early, 1)
        dep.kill(0)
        threads, results = submit_threads(sdks, late, 1, m, view.model_hash)
        time.sleep(max(0.0, view.deadline - time.time()) + 4.0)  # down well past the deadline
        assert not results, f"a submit returned while party0 was down: {results}"
        dep.start(0)
        receipts |= receipts_of(threads, results, late, 1)
        status = wait_committed(dep, 1, timeout_s=60)
        assert {x.client_id for x in status.rounds[0].members} == set(clients), status.rounds[0].excluded
        check_acked_counted(dep, receipts)
        assert check_models(dep, m) == [1]
        for sdk in sdks.values():
            sdk.close()
    finally:
        dep.stop()


@pytest.mark.parametrize("victim", [0, 1])
def test_sigterm_during_uploads_is_retried(tmp_path, victim):
    m, clients = 300_000, [f"c{i}" for i in range(10)]
    dep = deployment(tmp_path / "dep", clients, m, deadline_s=120.0)
    try:
        sdks = {c: dep.client(c) for c in clients}
        for sdk in sdks.values():
            sdk.register()
        view = sdks["c0"].wait_for_round(0, timeout_s=60)
        for sdk in sdks.values():
            sdk.round_state()
        threads, results = submit_threads(sdks, clients, 1, m, view.model_hash)
        time.sleep(0.3)  # uploads in flight
        dep.stop(victim)  # SIGTERM: a graceful stop
        time.sleep(1.0)
        dep.start(victim)
        receipts = receipts_of(threads, results, clients, 1)
        status = wait_committed(dep, 1, timeout_s=90)
        assert {x.client_id for x in status.rounds[0].members} == set(clients)
        check_acked_counted(dep, receipts)
        assert check_models(dep, m) == [1]
        for sdk in sdks.values():
            sdk.close()
    finally:
        dep.stop()


def test_task_streams_reconnect_with_back_off_across_a_graceful_restart(tmp_path):
    """A client serving tasks while party1 stops (SIGTERM) and restarts 3 s later opens a few
    task streams to it, not one per poll (its reconnects back off)."""
    dep = deployment(tmp_path / "dep", ["c0"], 100)
    try:
        with dep.client("c0") as sdk:
            sdk.register()
            stub = sdk._stubs[1]
            opened: list[float] = []
            watch = stub.WatchTasks

            def counted(*args, **kwargs):
                opened.append(time.time())
                return watch(*args, **kwargs)

            stub.WatchTasks = counted
            stop = threading.Event()
            serving = threading.Thread(
                target=sdk.serve_tasks, args=(lambda params, task: (params, 1),), kwargs={"stop": stop}, daemon=True
            )
            serving.start()
            time.sleep(1.0)
            before = len(opened)
            dep.stop(1)
            time.sleep(3.0)
            dep.start(1)
            time.sleep(2.0)
            stop.set()
            serving.join(10)
        reconnects = len(opened) - before
        assert 1 <= reconnects <= 10, f"{reconnects} task streams opened to party1 in about 6 s"
    finally:
        dep.stop()
