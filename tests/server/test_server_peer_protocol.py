"""The follower's side of the round protocol, driven step by step over mutual TLS by the
test acting as party0 (party1 runs as a real process; party0 is not started)."""

from __future__ import annotations

import grpc
import numpy as np
import pytest

from harness.local import LocalDeployment
from mpc.fixedpoint import decode, random_ring, reconstruct_encoded, share, to_wire
from proto.starfish.v1 import client_pb2, client_pb2_grpc, common_pb2, peer_pb2, peer_pb2_grpc
from proto.wire import model_hash, model_messages, read_share_stream, sha256_hex, share_messages
from server.store import membership_digest

from helpers.server_fixtures import bound_header

pytestmark = pytest.mark.timeout(300)
M = 16
LR = 0.5


@pytest.fixture
def follower(tmp_path):
    yield from _follower(tmp_path, {"min_cohort": 2})


@pytest.fixture
def dp_follower(tmp_path):
    yield from _follower(tmp_path, {"min_cohort": 2, "dp": True, "clip": 1.0})


def _follower(tmp_path, privacy: dict):
    # the test drives party1 without a dealer: no input check (tests/server/test_upload_check_peer.py has one)
    dep = LocalDeployment(tmp_path / "dep", clients=["u", "v"], privacy=privacy, validation={"enabled": False})
    dep.start(1)
    certs = dep.root / "certs"
    creds = grpc.ssl_channel_credentials(
        (certs / "ca.pem").read_bytes(), (certs / "party0.key").read_bytes(), (certs / "party0.pem").read_bytes()
    )
    peer = grpc.secure_channel(f"127.0.0.1:{dep.creds['ports']['peer1']}", creds)
    client = grpc.secure_channel(dep.address(1), grpc.ssl_channel_credentials(dep.ca_cert.read_bytes()))
    yield dep, peer_pb2_grpc.PeerServiceStub(peer), client_pb2_grpc.ClientServiceStub(client)
    peer.close()
    client.close()
    dep.stop()


def _md(dep, cid):
    return (("x-starfish-client", cid), ("x-starfish-token", dep.creds["clients"][cid]))


def _upload(dep, stub, cid, h, share1, n):
    scalar = to_wire(random_ring(1))
    data = to_wire(share1)
    header = bound_header(1, 1, data, n, h, scalar, scalar, m=M)
    stub.Register(client_pb2.RegisterRequest(), metadata=_md(dep, cid))
    stub.UploadShares(
        iter([common_pb2.UploadChunk(header=header), common_pb2.UploadChunk(data=data)]), metadata=_md(dep, cid)
    )


def _to_aggregated(dep, peer, client):
    """Install M_0, open round 1, upload u and v, close, agree, exchange.

    Returns (h0, expected M_1, follower's M_1 hash)."""
    m0 = np.linspace(0, 1, M).astype(np.float32)
    h0 = model_hash("toy", m0)
    header = common_pb2.ModelHeader(arch="toy", num_params=M, model_hash=h0, lr=LR)
    assert peer.InitModel(model_messages(header, m0, 1024)).model_hash == h0
    with pytest.raises(grpc.RpcError) as info:  # M_0 of another content is refused
        peer.OpenRound(peer_pb2.OpenRoundRequest(round=1, model_hash="f" * 64, deadline_unix=1e12, lr=LR))
    assert "cannot open round 1" in info.value.details()
    peer.OpenRound(peer_pb2.OpenRoundRequest(round=1, model_hash=h0, deadline_unix=1e12, lr=LR))
    with pytest.raises(grpc.RpcError) as info:  # a membership naming a client the follower holds nothing of
        peer.AgreeMembership(
            peer_pb2.Membership(
                round=1,
                membership_sha256=membership_digest({"u": 3}, 1),
                members=[common_pb2.Member(client_id="u", n_samples=3)],
            )
        )
    assert "holds no matching upload of 'u'" in info.value.details()
    grads = {"u": np.random.default_rng(0).normal(size=M), "v": np.random.default_rng(1).normal(size=M)}
    weights = {"u": 3, "v": 5}
    capped = {"u": 3, "v": 3}  # k = 2: no principal above half of the round's weight (unlearning.weight_cap)
    leader_agg = np.zeros(M, dtype=np.int64)
    for cid, g in grads.items():
        s0, s1 = share(g)
        _upload(dep, client, cid, h0, s1, weights[cid])
        with np.errstate(over="ignore"):
            leader_agg += capped[cid] * s0
    members = peer.CloseRound(peer_pb2.RoundRef(round=1))
    assert {(m.client_id, m.n_samples) for m in members.members} == {("u", 3), ("v", 5)}
    bindings = {m.client_id: m.binding_sha256 for m in members.members}
    assert all(len(b) == 64 for b in bindings.values())
    with pytest.raises(grpc.RpcError) as info:  # closed: further uploads are refused
        _upload(dep, client, "u", h0, random_ring(M), 3)
    assert info.value.code() in (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.ALREADY_EXISTS)
    digest = membership_digest(weights, 1)
    with pytest.raises(grpc.RpcError) as info:  # a member whose binding is not the follower's: another sharing
        peer.AgreeMembership(
            peer_pb2.Membership(
                round=1,
                membership_sha256=digest,
                members=[
                    common_pb2.Member(client_id=c, n_samples=n, binding_sha256="0" * 64) for c, n in weights.items()
                ],
            )
        )
    assert "holds a half of another sharing of 'u'" in info.value.details()
    with pytest.raises(grpc.RpcError) as info:  # one consistent member, below party1's own minimum cohort
        peer.AgreeMembership(
            peer_pb2.Membership(
                round=1,
                membership_sha256=membership_digest({"u": 3}, 1),
                members=[common_pb2.Member(client_id="u", n_samples=3, binding_sha256=bindings["u"])],
            )
        )
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "party1 refuses a membership of 1 client(s), fewer than its minimum cohort 2" in info.value.details()

    def agree(proposed: dict[str, int], principal: str = "") -> None:
        members = [
            common_pb2.Member(client_id=c, n_samples=n, binding_sha256=bindings[c], weight=proposed[c])
            for c, n in weights.items()
        ]
        members[0].principal = principal
        peer.AgreeMembership(peer_pb2.Membership(round=1, membership_sha256=digest, members=members))

    with pytest.raises(grpc.RpcError) as info:  # uncapped weights: v would hold 5/8 > 1/k of the round
        agree(weights)
    assert "capped weights for minimum cohort 2 differ for ['v']" in info.value.details()
    with pytest.raises(grpc.RpcError) as info:  # a principal party1 did not enroll u for
        agree(capped, principal="org")
    assert "client 'u' is enrolled for principal 'u' here, 'org' at the other party" in info.value.details()
    agree(capped, principal="u")  # a client's own id is its principal
    data = to_wire(leader_agg)
    hdr = common_pb2.ShareHeader(
        round=1, shape=[M], dtype="int64", membership_sha256=digest, content_sha256=sha256_hex(data)
    )
    _, follower_agg = read_share_stream(iter(peer.ExchangeAggregate(share_messages(hdr, data, 64))), M)
    weighted = decode(reconstruct_encoded(leader_agg, follower_agg))
    expected = (m0 - LR * weighted / 6).astype(np.float32)
    assert np.allclose(weighted, 3 * grads["u"] + 3 * grads["v"], atol=6 * 2.0**-16)
    return h0, expected


def test_follower_commits_only_the_same_model(follower):
    dep, peer, client = follower
    _, expected = _to_aggregated(dep, peer, client)
    ack = peer.CommitRound(peer_pb2.CommitRequest(round=1, model_hash=model_hash("toy", expected)))
    assert ack.model_hash == model_hash("toy", expected)
    # idempotent retry after a lost ack
    assert peer.CommitRound(peer_pb2.CommitRequest(round=1, model_hash=ack.model_hash)).model_hash == ack.model_hash


def test_hash_mismatch_stops_the_round_with_a_clear_error(follower):
    dep, peer, client = follower
    _to_aggregated(dep, peer, client)
    with pytest.raises(grpc.RpcError) as info:
        peer.CommitRound(peer_pb2.CommitRequest(round=1, model_hash="0" * 64))
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "model hash mismatch in round 1" in info.value.details()
    state = client.GetRound(client_pb2.GetRoundRequest(), metadata=_md(dep, "u"))
    assert state.phase == common_pb2.ROUND_PHASE_HALTED and "mismatch" in state.error


def test_a_dp_party_never_sends_its_share_of_the_unclipped_sum(dp_follower):
    """With `[privacy] dp = true` aggregates are opened only clipped and noised in 2PC
    (server.stage1_clip): the exchange of raw aggregate shares is refused outright."""
    _, peer, _ = dp_follower
    data = to_wire(np.zeros(M, dtype=np.int64))
    hdr = common_pb2.ShareHeader(round=1, shape=[M], dtype="int64", membership_sha256="0" * 64)
    hdr.content_sha256 = sha256_hex(data)
    with pytest.raises(grpc.RpcError) as info:
        list(peer.ExchangeAggregate(share_messages(hdr, data, 64)))
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "only clipped and noised in 2PC" in info.value.details()


def test_a_party_without_dp_refuses_a_clip_session(follower):
    _, peer, _ = follower
    request = peer_pb2.ClipRoundRequest(round=1, membership_sha256="0" * 64, session_id="stage1-1.0-ab")
    with pytest.raises(grpc.RpcError) as info:
        peer.ClipRound(request)
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "party1 has [privacy] dp = false" in info.value.details()
