"""Operator metrics and logs of the running parties (shared `parties` fixture, JSON logs):

* the Prometheus endpoint answers on the configured loopback address only, and its
  counters follow what the service does (uploads refused by reason, RPCs, store size);
* every log line is one JSON object with the party and the request id; an RPC's lines
  carry the id the caller sent, which comes back in the reply's metadata;
* no credential appears in the logs.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import grpc
import pytest

from proto.starfish.v1 import client_pb2, client_pb2_grpc

from helpers.metrics_scrape import scrape, value
from helpers.server_fixtures import client_channel, metadata, raw_upload

pytestmark = pytest.mark.timeout(120)


def _refused(call) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as err:
        call()
    return err.value.code()


def test_refused_uploads_are_counted_by_reason(parties):
    url = parties.metrics_url(0)
    before = scrape(url)
    assert _refused(lambda: raw_upload(parties, 0, "c1", token="not-the-token")) == grpc.StatusCode.UNAUTHENTICATED
    assert _refused(lambda: raw_upload(parties, 0, "c2", round=7)) == grpc.StatusCode.FAILED_PRECONDITION
    assert _refused(lambda: raw_upload(parties, 0, "c2", model_hash="ab" * 32)) == grpc.StatusCode.FAILED_PRECONDITION
    assert _refused(lambda: raw_upload(parties, 0, "c2", dtype="float32")) == grpc.StatusCode.INVALID_ARGUMENT
    after = scrape(url)
    name = "starfish_uploads_refused_total"
    for kind, reason in (("unknown", "unauthenticated"), ("round", "round_closed"), ("round", "wrong_model")):
        assert value(after, name, kind=kind, reason=reason) - value(before, name, kind=kind, reason=reason) == 1
    assert value(after, name, kind="round", reason="invalid") - value(before, name, kind="round", reason="invalid") == 1
    rpcs = "starfish_rpc_requests_total"
    assert value(after, rpcs, method="UploadShares") - value(before, rpcs, method="UploadShares") == 4
    assert value(after, "starfish_party_info", party="party0") == 1
    assert value(after, "starfish_store_bytes", kind="models") > 0  # M_0 is stored
    assert value(after, "starfish_training_halted") == 0
    assert value(scrape(parties.metrics_url(1)), "starfish_party_info", party="party1") == 1


def listening_addresses(port: int) -> list[str]:
    """Local addresses (hex, as the kernel lists them) of the TCP sockets listening on `port`."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.rsplit(":", 1)
            if state == "0A" and int(hex_port, 16) == port:  # 0A = LISTEN
                found.append(address)
    return found


def test_metrics_listen_only_on_the_configured_interface(parties):
    for role in (0, 1):
        port = int(parties.metrics_url(role).rsplit(":", 1)[1].split("/")[0])
        assert listening_addresses(port) == ["0100007F"]  # 127.0.0.1, not 0.0.0.0


def test_log_lines_are_json_with_the_callers_request_id(parties):
    with client_channel(parties, 0) as ch:
        stub = client_pb2_grpc.ClientServiceStub(ch)
        _, call = stub.Register.with_call(
            client_pb2.RegisterRequest(), metadata=(*metadata(parties, "c4"), ("x-request-id", "audit-42")), timeout=20
        )
        assert ("x-request-id", "audit-42") in call.initial_metadata()
        _, call = stub.GetRound.with_call(client_pb2.GetRoundRequest(), metadata=metadata(parties, "c4"), timeout=20)
        assigned = dict(call.initial_metadata())["x-request-id"]
        assert len(assigned) == 16  # a fresh id when the caller sends none
    log = parties.root / "logs" / "party0.log"
    end = time.time() + 10
    while time.time() < end and '"audit-42"' not in log.read_text():
        time.sleep(0.1)
    entries = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    assert entries and {"time", "level", "party", "logger", "request_id", "message"} <= set(entries[0])
    mine = [e for e in entries if e["request_id"] == "audit-42"]
    assert [e["message"] for e in mine] == ["client c4 registered"] and mine[0]["party"] == "party0"
    rounds = [e for e in entries if e["message"].startswith("round 1 opened")]
    assert rounds and rounds[0]["request_id"] == "round-1"  # background work runs under a named scope
    text = log.read_text() + (parties.root / "logs" / "party1.log").read_text()
    credentials = [parties.creds["admin_token"], *parties.creds["clients"].values()]
    assert not [c for c in credentials if c in text]


def test_each_party_exports_its_own_side_of_the_peer_link(parties):
    p0, p1 = scrape(parties.metrics_url(0)), scrape(parties.metrics_url(1))
    assert value(p0, "starfish_peer_up") == 1  # party0 has called party1 (the round is open)
    assert ("starfish_peer_up", ()) not in p1 and ("starfish_peer_last_contact_timestamp_seconds", ()) not in p0
    assert value(p1, "starfish_peer_last_contact_timestamp_seconds") > 0


def test_share_pair_mismatch_hook_counts_by_a_bounded_reason(caplog):
    from server import metrics

    def count(reason: str) -> float:
        return metrics.REGISTRY.get_sample_value("starfish_share_pair_mismatches_total", {"reason": reason}) or 0.0

    before = {r: count(r) for r in ("binding", "other")}
    metrics.share_pair_mismatch(7, "c9", "binding", "the parties hold halves of different sharings")
    metrics.share_pair_mismatch(7, "c8", "the parties hold different n_j (party0: 3, party1: 4)")
    assert count("binding") - before["binding"] == 1 and count("other") - before["other"] == 1
    assert "round 7: upload of c9 excluded: the parties hold halves" in caplog.text
    assert "(share pair mismatch: binding)" in caplog.text
