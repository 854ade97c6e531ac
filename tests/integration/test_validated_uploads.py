"""Stage I with input validation, on real processes (dealer, party0, party1 over TLS).

A client holding a valid credential uploads a correctly bound share pair of a poisoned
gradient (g[0] = 2^30, far above any honest coordinate), a reported norm of −1 and a
threshold δ = 2^40, made by hand so that none of the SDK's own checks runs. The round
commits without it: both parties record and log why, count it in their metrics, the client
is told through GetUploadStatus, and M_1 is FedAvg of the nine valid members within
fixed-point tolerance (without the check M_1[0] moves by about −lr·2^30/10). The ten uploads
are one vectorised check: 6 CheckStep calls (3, and 3 more re-checking the refused one).
"""

from __future__ import annotations

import re
import time
import urllib.request

import grpc
import numpy as np
import pytest

from harness.local import LocalDeployment
from proto.binding import round_target
from proto.starfish.v1 import client_pb2_grpc, common_pb2

from helpers.poisoned_inputs import poisoned_sharing
from helpers.stage1_helpers import fedavg_step, tolerance, wait_committed

pytestmark = pytest.mark.timeout(300)
LR = 0.5
M = 64
HONEST = dict.fromkeys("abcdefghi", 20)  #: equal n_j: the weight cap (at most 1/k of a round each) keeps them
ATTACKER = "mallory"


def poisoned_round_upload(round_index: int, model_hash: str, n_samples: int):
    """g[0] = 2^30 (the rest 0.01), reported ‖g‖ = −1, δ = 2^40."""
    g = np.full(M, 0.01)
    g[0] = 2.0**30
    return poisoned_sharing(round_target(round_index), model_hash, n_samples, g, -1.0, 2.0**40)


def _send(dep, client: str, sharing) -> None:
    creds = grpc.ssl_channel_credentials(root_certificates=dep.ca_cert.read_bytes())
    for party in (0, 1):
        header, data = sharing.header(party), sharing.halves[party].data
        with grpc.secure_channel(dep.address(party), creds) as ch:
            client_pb2_grpc.ClientServiceStub(ch).UploadShares(
                iter([common_pb2.UploadChunk(header=header), common_pb2.UploadChunk(data=data)]),
                metadata=(("x-starfish-client", client), ("x-starfish-token", dep.creds["clients"][client])),
                timeout=30,
            )


def _metric(dep, role: int, name: str) -> float:
    text = urllib.request.urlopen(dep.metrics_url(role), timeout=10).read().decode()
    found = re.findall(rf"^{re.escape(name)} (\S+)$", text, re.M)
    return float(found[0]) if found else 0.0


def test_poisoned_upload_is_excluded_and_named_and_the_model_is_fedavg_of_the_rest(tmp_path):
    dep = LocalDeployment(
        tmp_path / "dep",
        clients=[*HONEST, ATTACKER],
        rounds={"deadline_s": 120.0, "poll_s": 0.05, "max_rounds": 1},
        validation={"enabled": True},
    )
    dep.start()
    try:
        m0 = np.linspace(-0.1, 0.1, M).astype(np.float32)
        with dep.admin() as admin:
            admin.start_training("vec-64", m0, LR)
        rng = np.random.default_rng(7)
        honest = {c: (rng.normal(0, 0.05, M), n) for c, n in HONEST.items()}
        for client in [*HONEST, ATTACKER]:  # all registered first: the round waits for every upload
            with dep.client(client) as c:
                c.register()
        for client, (g, n) in honest.items():
            with dep.client(client) as c:
                c.wait_for_round(after=0, timeout_s=60)
                c.submit(1, g, n)
        with dep.client(ATTACKER) as c:
            view = c.wait_for_round(after=0, timeout_s=60)
            _send(dep, ATTACKER, poisoned_round_upload(1, view.model_hash, 40))
        status = wait_committed(dep, 1)
        assert sorted(m.client_id for m in status.rounds[0].members) == sorted(HONEST)
        with dep.client(ATTACKER) as c:
            model = c.fetch_model(1).params
            upload = c.upload_status(1)
        expected = fedavg_step(m0, list(honest.values()), LR)
        assert np.all(np.abs(model - expected) <= tolerance(LR, expected))
        assert upload.outcome == "excluded" and "upload check" in upload.reason
        for named in ("a coordinate is outside the range", "reported norm", "threshold delta"):
            assert named in upload.reason, upload.reason
        for role in (0, 1):
            log = (dep.root / "logs" / f"party{role}.log").read_text()
            assert re.search(rf"{ATTACKER}.*(excluded|refused).*upload check", log), role
            assert _metric(dep, role, 'starfish_inputs_refused_total{check="range",kind="round"}') == 1.0
            assert _metric(dep, role, "starfish_validation_enabled") == 1.0
        assert _metric(dep, 0, 'starfish_input_check_batches_total{outcome="completed"}') == 1.0
        assert _metric(dep, 0, 'starfish_input_check_batches_total{outcome="failed"}') == 0.0
        assert _metric(dep, 1, 'starfish_rpc_requests_total{method="CheckStep"}') == 6.0
        # party0 meters the aggregate exchange and the check's step vectors, both directions:
        # 3m + 5, 2 and 4 words per item and attempt (ten items, then the refused one again)
        checked = (len(HONEST) + 1) + 1
        assert status.rounds[0].peer_bytes == 2 * 8 * M + 2 * 8 * checked * (3 * M + 11)
    finally:
        dep.stop()


def test_a_round_closes_only_once_the_dealer_serves_its_check(tmp_path):
    """With the dealer down the check batch fails, nothing is decided and the round stays
    closed-but-uncommitted; once the dealer is back the retried batch passes every client."""
    dep = LocalDeployment(
        tmp_path / "dep",
        clients=list(HONEST),
        rounds={"deadline_s": 120.0, "poll_s": 0.05, "max_rounds": 1},
        jobs={"session_timeout_s": 3.0},
        validation={"enabled": True},
    )
    dep.start()
    try:
        with dep.admin() as admin:
            admin.start_training("vec-64", np.zeros(M, dtype=np.float32), LR)
        dep.stop_dealer()
        rng = np.random.default_rng(8)
        for client in HONEST:
            with dep.client(client) as c:
                c.register()
        for client, n in HONEST.items():
            with dep.client(client) as c:
                c.wait_for_round(after=0, timeout_s=60)
                c.submit(1, rng.normal(0, 0.05, M), n)
        failed = 'starfish_input_check_batches_total{outcome="failed"}'
        end = time.time() + 60
        while _metric(dep, 0, failed) < 2 and time.time() < end:
            time.sleep(0.2)
        assert _metric(dep, 0, failed) >= 2  # retried, not given up
        with dep.admin() as admin:
            assert admin.status().latest_committed == 0
        dep.start_dealer()
        status = wait_committed(dep, 1, timeout_s=90)
        assert sorted(m.client_id for m in status.rounds[0].members) == sorted(HONEST)
        assert "the dealer failed check batch" in (dep.root / "logs" / "party0.log").read_text()
    finally:
        dep.stop()
