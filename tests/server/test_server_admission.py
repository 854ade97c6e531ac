"""Admission control on a real party: no client can use up the party's threads.

* One client opening 40 WatchTasks streams gets 4 (`max_streams_per_client`); the rest end at
  once with RESOURCE_EXHAUSTED naming the limit. With 40 streams of ten other clients open and
  ten clients streaming uploads, the admin API and other clients' calls still answer promptly.
* The limit over all clients holds, slots are released when streams end, and the SDK retries a
  call refused as busy until it is admitted.
"""

from __future__ import annotations

import threading
import time

import grpc
import numpy as np
import pytest

from harness.local import LocalDeployment
from mpc.fixedpoint import random_ring, to_wire
from proto.starfish.v1 import admin_pb2, admin_pb2_grpc, client_pb2, client_pb2_grpc, common_pb2
from proto.wire import chunks

from helpers.server_fixtures import admin_channel, bound_header, client_channel, metadata

pytestmark = pytest.mark.timeout(300)
WATCH = client_pb2.WatchTasksRequest()


def _deploy(root, clients: list[str], m: int, **admission) -> LocalDeployment:
    dep = LocalDeployment(root, clients=clients, rounds={"deadline_s": 3600.0, "poll_s": 0.05}, admission=admission)
    dep.start()
    with dep.admin() as admin:
        admin.start_training("toy", np.zeros(m, dtype=np.float32), 0.1)
    for c in clients:
        with dep.client(c) as sdk:
            sdk.register()
    with dep.client(clients[0]) as sdk:
        sdk.wait_for_round(0, timeout_s=90)
    return dep


def _streams(dep, channel, client: str, count: int) -> list:
    stub = client_pb2_grpc.ClientServiceStub(channel)
    return [stub.WatchTasks(WATCH, metadata=metadata(dep, client)) for _ in range(count)]


def _settle(calls: list, wait_s: float = 3.0) -> tuple[list, list]:
    """(open, refused) after the refused calls had time to end."""
    time.sleep(wait_s)
    refused = [c for c in calls if c.done()]
    return [c for c in calls if not c.done()], refused


def _upload_forever(dep, client: str, m: int, stop: threading.Event, sent: list) -> None:
    """Resend one bound upload of m parameters to party0 (duplicates after the first) until stopped."""
    with client_channel(dep, 0) as ch:
        stub = client_pb2_grpc.ClientServiceStub(ch)
        state = stub.GetRound(client_pb2.GetRoundRequest(), metadata=metadata(dep, client))
        data, scalar = to_wire(random_ring(m)), to_wire(random_ring(1))
        header = bound_header(0, state.round, data, 10, state.model_hash, scalar, scalar, m=m)
        while not stop.is_set():
            msgs = [common_pb2.UploadChunk(header=header)] + [
                common_pb2.UploadChunk(data=p) for p in chunks(data, 1 << 20)
            ]
            stub.UploadShares(iter(msgs), metadata=metadata(dep, client), timeout=60)
            sent.append(1)


def test_one_client_cannot_exhaust_the_party_and_the_admin_stays_responsive(tmp_path):
    m = 200_000
    clients = [f"c{i}" for i in range(12)]
    dep = _deploy(tmp_path / "dep", clients, m)
    channels = [client_channel(dep, 0) for _ in range(12)]
    stop = threading.Event()
    try:
        greedy = _streams(dep, channels[0], "c0", 40)
        held, refused = _settle(greedy)
        assert len(held) == 4 and len(refused) == 36
        assert {c.code() for c in refused} == {grpc.StatusCode.RESOURCE_EXHAUSTED}
        assert "already has 4 concurrent WatchTasks streams" in refused[0].details()
        assert "max_streams_per_client" in refused[0].details()
        log = (dep.root / "logs" / "party0.log").read_text()
        assert "admission refused 1 call(s) since the last report; latest: party0: client 'c0'" in log
        others = [s for i in range(1, 11) for s in _streams(dep, channels[i], f"c{i}", 4)]
        assert len(_settle(others, 1.0)[0]) == 40  # 44 streams open on party0
        sent: list = []
        uploaders = [
            threading.Thread(target=_upload_forever, args=(dep, f"c{i}", m, stop, sent), daemon=True)
            for i in range(1, 11)
        ]
        for t in uploaders:
            t.start()
        time.sleep(1.0)
        admin = admin_pb2_grpc.AdminServiceStub(admin_channel(dep))  # the admin API's own port
        latencies = []
        for _ in range(10):
            start = time.perf_counter()
            status = admin.GetTrainingStatus(admin_pb2.TrainingStatusRequest(), metadata=dep.admin_metadata, timeout=5)
            latencies.append(time.perf_counter() - start)
            assert status.open_round == 1
        round_state = client_pb2_grpc.ClientServiceStub(channels[11]).GetRound(
            client_pb2.GetRoundRequest(), metadata=metadata(dep, "c11"), timeout=5
        )
        assert round_state.round == 1 and len(sent) > 0, "uploads were not in flight"
        assert max(latencies) < 5.0, latencies
    finally:
        stop.set()
        for ch in channels:
            ch.close()
        dep.stop()


def _blocked_upload(dep, channel, client: str, release: threading.Event):
    """An UploadShares call whose request stream stalls after its header until `release`."""

    stub = client_pb2_grpc.ClientServiceStub(channel)
    state = stub.GetRound(client_pb2.GetRoundRequest(), metadata=metadata(dep, client))
    scalar = to_wire(random_ring(1))
    header = bound_header(1, state.round, to_wire(random_ring(64)), 3, state.model_hash, scalar, scalar, m=64)

    def requests():
        yield common_pb2.UploadChunk(header=header)
        release.wait(60)  # then end without the share data

    return stub.UploadShares.future(requests(), metadata=metadata(dep, client))


def test_limit_over_all_clients_releases_and_busy_calls_are_retried(tmp_path):
    clients = [f"k{i}" for i in range(8)]
    limits = {"max_streams": 6, "max_streams_per_client": 4, "max_requests": 3, "max_requests_per_client": 2}
    dep = _deploy(tmp_path / "dep", clients, 64, **limits)
    ch_a, ch_b = client_channel(dep, 1), client_channel(dep, 1)
    try:
        mine = _streams(dep, ch_a, "k0", 4)
        assert len(_settle(mine)[0]) == 4  # k0's four are admitted before k1 asks (separate channels race)
        theirs = _streams(dep, ch_b, "k1", 3)
        held, refused = _settle(theirs)
        assert len(held) == 2 and len(refused) == 1
        assert "serving 6 concurrent WatchTasks streams of all clients" in refused[0].details()
        for call in mine:
            call.cancel()
        time.sleep(1.5)
        assert len(_settle(_streams(dep, ch_b, "k1", 2), 1.5)[0]) == 2  # k0's slots were released
        release = threading.Event()
        blockers = [_blocked_upload(dep, ch, c, release) for ch, c in ((ch_a, "k6"), (ch_a, "k6"), (ch_b, "k7"))]
        time.sleep(1.0)  # three uploads that never finish hold all request slots of party1
        with dep.client("k2") as sdk:
            threading.Timer(2.0, release.set).start()
            start = time.perf_counter()
            receipt = sdk.submit(1, np.full(64, 0.25), 3)  # refused as busy until the slots free up
            assert receipt.round == 1 and time.perf_counter() - start >= 1.5
        assert all(b.code() == grpc.StatusCode.INVALID_ARGUMENT for b in blockers)  # cut-off streams store nothing
    finally:
        ch_a.close()
        ch_b.close()
        dep.stop()
