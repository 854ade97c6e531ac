"""party1's side of the input check, driven over mutual TLS by the test acting as party0
(party1 runs as a real process with `[validation]` on; party0 is not started).

party1 admits no member it did not see pass its own check, and refuses a batch whose bound
is not its own, whose dealer it does not trust, or that names an upload it does not hold."""

from __future__ import annotations

import secrets

import grpc
import numpy as np
import pytest

from harness.local import LocalDeployment
from mpc.fixedpoint import share, to_wire
from mpc.input_check import largest_norm
from proto.starfish.v1 import client_pb2, client_pb2_grpc, common_pb2, peer_pb2, peer_pb2_grpc
from proto.wire import model_hash, model_messages
from server.store import membership_digest

from helpers.server_fixtures import bound_header

pytestmark = pytest.mark.timeout(120)
M = 16
WEIGHTS = {"u": 3, "v": 5}


@pytest.fixture
def closed_round(tmp_path):
    """party1 with round 1 closed over uploads of u and v; (peer stub, bindings)."""
    dep = LocalDeployment(
        tmp_path / "dep", clients=list(WEIGHTS), privacy={"min_cohort": 2}, validation={"enabled": True}
    )
    dep.start(1)
    certs = dep.root / "certs"
    creds = grpc.ssl_channel_credentials(
        (certs / "ca.pem").read_bytes(), (certs / "party0.key").read_bytes(), (certs / "party0.pem").read_bytes()
    )
    peer_channel = grpc.secure_channel(f"127.0.0.1:{dep.creds['ports']['peer1']}", creds)
    client_channel = grpc.secure_channel(dep.address(1), grpc.ssl_channel_credentials(dep.ca_cert.read_bytes()))
    peer, client = peer_pb2_grpc.PeerServiceStub(peer_channel), client_pb2_grpc.ClientServiceStub(client_channel)
    try:
        m0 = np.zeros(M, dtype=np.float32)
        h0 = model_hash("toy", m0)
        header = common_pb2.ModelHeader(arch="toy", num_params=M, model_hash=h0, lr=0.5)
        peer.InitModel(model_messages(header, m0, 1024))
        peer.OpenRound(peer_pb2.OpenRoundRequest(round=1, model_hash=h0, deadline_unix=1e12, lr=0.5))
        for cid, n in WEIGHTS.items():
            md = (("x-starfish-client", cid), ("x-starfish-token", dep.creds["clients"][cid]))
            data = to_wire(share(np.full(M, 0.1))[1])
            scalar = to_wire(share(np.array([0.4]))[1])
            client.Register(client_pb2.RegisterRequest(), metadata=md)
            header = bound_header(1, 1, data, n, h0, scalar, scalar, m=M)
            chunks = [common_pb2.UploadChunk(header=header), common_pb2.UploadChunk(data=data)]
            client.UploadShares(iter(chunks), metadata=md)
        members = peer.CloseRound(peer_pb2.RoundRef(round=1))
        yield peer, {m.client_id: m.binding_sha256 for m in members.members}
    finally:
        peer_channel.close()
        client_channel.close()
        dep.stop()


def _start(peer, **changes) -> grpc.RpcError:
    request = peer_pb2.CheckStart(
        batch_id="check-r1.1-ab",
        seed=secrets.token_bytes(32),
        round=1,
        items=[peer_pb2.CheckItem(client_id=c) for c in WEIGHTS],
        dealer_identity="dealer",
        max_norm=largest_norm(M, 16),
    )
    for key, value in changes.items():
        if key == "items":
            del request.items[:]
            request.items.extend(value)
        else:
            setattr(request, key, value)
    with pytest.raises(grpc.RpcError) as info:
        peer.StartCheck(request)
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    return info.value


def test_party1_admits_no_member_it_did_not_see_pass(closed_round):
    peer, bindings = closed_round
    members = [common_pb2.Member(client_id=c, n_samples=n, binding_sha256=bindings[c]) for c, n in WEIGHTS.items()]
    with pytest.raises(grpc.RpcError) as info:
        peer.AgreeMembership(
            peer_pb2.Membership(round=1, membership_sha256=membership_digest(WEIGHTS, 1), members=members)
        )
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "party1 did not see u, v pass validation" in info.value.details()


def test_party1_checks_only_against_its_own_bound_and_dealer_and_what_it_holds(closed_round):
    peer, _ = closed_round
    top = largest_norm(M, 16)
    refused = _start(peer, max_norm=top / 2)
    assert "checks against max_norm" in refused.details() and repr(top) in refused.details()
    assert "this party trusts 'dealer'" in _start(peer, dealer_identity="other-dealer").details()
    assert "holds no such item" in _start(peer, items=[peer_pb2.CheckItem(client_id="w")]).details()
    twice = [peer_pb2.CheckItem(client_id="u"), peer_pb2.CheckItem(client_id="u")]
    assert "each client once" in _start(peer, items=twice).details()
    assert "a batch seed has 32 bytes" in _start(peer, seed=b"short").details()
    with pytest.raises(grpc.RpcError) as info:  # nothing was started by the refused calls
        peer.FinishCheck(peer_pb2.CheckRef(batch_id="check-r1.1-ab"))
    assert info.value.code() == grpc.StatusCode.ABORTED and "no check batch" in info.value.details()
