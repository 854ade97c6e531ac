"""The two parties only ever aggregate two halves of one sharing.

* A client whose upload reached party0 only (party1 down, the call gave up) calls `submit`
  again: the SDK resends the same sharing from its outbox, party0 answers "duplicate", party1
  stores the matching half, and the round counts the client once, correctly.
* A client that sends halves of two different sharings (no outbox: one sharing to party0,
  another to party1) is excluded when the round closes — logged with the client and reason on
  both parties and reported to the client — and the committed model is FedAvg of the others.
"""

from __future__ import annotations

import grpc
import numpy as np
import pytest

from client_sdk import PartyUnreachableError
from client_sdk.sharing import make_sharing
from proto.binding import round_target
from proto.starfish.v1 import client_pb2, client_pb2_grpc, common_pb2

from helpers.fault_helpers import check_acked_counted, check_models, deployment, gradient, samples
from helpers.metrics_scrape import scrape, value
from helpers.stage1_helpers import F, wait_committed

pytestmark = pytest.mark.timeout(300)
M = 64


def test_retry_after_an_upload_reached_one_party_resends_the_same_sharing(tmp_path):
    dep = deployment(tmp_path / "dep", ["a", "b"], M, min_cohort=2, deadline_s=120.0)  # two clients suffice here
    try:
        a, b = dep.client("a", upload_retry_s=3.0), dep.client("b")
        for c in (a, b):
            c.register()
        view = a.wait_for_round(0, timeout_s=90)
        dep.kill(1)
        with pytest.raises(PartyUnreachableError, match="party1"):
            a.submit(1, gradient("a", 1, M), samples("a"), view.model_hash)
        assert a.pending_uploads() == ["round:1"]  # party0 acknowledged, party1 did not
        dep.start(1)
        receipt = a.submit(1, gradient("a", 1, M), samples("a"), view.model_hash)
        assert receipt.resumed and receipt.duplicate == (False, False)  # party0 kept its half; party1 got its own
        receipts = {(1, "a"): receipt, (1, "b"): b.submit(1, gradient("b", 1, M), samples("b"))}
        wait_committed(dep, 1, timeout_s=120)
        check_acked_counted(dep, receipts)
        assert check_models(dep, M) == [1]
        assert a.upload_status(1).outcome == "counted"
        for c in (a, b):
            c.close()
    finally:
        dep.stop()


def _send_half(dep, party: int, client: str, sharing) -> None:
    creds = grpc.ssl_channel_credentials(root_certificates=dep.ca_cert.read_bytes())
    with grpc.secure_channel(dep.address(party), creds) as ch:
        client_pb2_grpc.ClientServiceStub(ch).UploadShares(
            iter(
                [
                    common_pb2.UploadChunk(header=sharing.header(party)),
                    common_pb2.UploadChunk(data=sharing.halves[party].data),
                ]
            ),
            metadata=(("x-starfish-client", client), ("x-starfish-token", dep.creds["clients"][client])),
            timeout=20,
        )


def test_halves_of_two_sharings_are_excluded_logged_and_reported(tmp_path):
    dep = deployment(tmp_path / "dep", ["a", "b", "m"], M, min_cohort=2, deadline_s=120.0)  # m is excluded
    try:
        clients = {c: dep.client(c) for c in ("a", "b", "m")}
        for c in clients.values():
            c.register()
        view = clients["a"].wait_for_round(0, timeout_s=90)
        receipts = {(1, c): clients[c].submit(1, gradient(c, 1, M), samples(c)) for c in ("a", "b")}
        g = gradient("m", 1, M)
        first, second = (
            make_sharing("m", round_target(1), g, samples("m"), view.model_hash, (F, 2.0**20), 0.4, False)
            for _ in range(2)
        )
        _send_half(dep, 0, "m", first)
        _send_half(dep, 1, "m", second)  # each half is valid on its own; together they are garbage
        status = wait_committed(dep, 1, timeout_s=120)
        assert {mb.client_id for mb in status.rounds[0].members} == {"a", "b"}
        reason = "the parties hold halves of different sharings (their bindings differ)"
        assert [(e.client_id, e.reason) for e in status.rounds[0].excluded] == [("m", reason)]
        told = clients["m"].upload_status(1)
        assert told.outcome == "excluded" and told.reason == reason
        assert [s.state for s in told.parties] == [client_pb2.UPLOAD_STATE_EXCLUDED] * 2
        for role in (0, 1):
            log = (dep.root / "logs" / f"party{role}.log").read_text()
            assert f"round 1: upload of m excluded: {reason}" in log
        # counted where party0 decides the membership, by its short reason code
        assert value(scrape(dep.metrics_url(0)), "starfish_share_pair_mismatches_total", reason="binding") == 1
        check_acked_counted(dep, receipts)
        assert check_models(dep, M) == [1]
        model = clients["a"].fetch_model(1).params
        assert np.max(np.abs(model)) < 1.0  # a mismatched pair would have added ~2^47·lr/Σn
        for c in clients.values():
            c.close()
    finally:
        dep.stop()
