"""Random and mutated requests for every RPC of the peer service, sent to each party with
the other party's certificate (mutual TLS: the caller the service trusts): none ends
UNKNOWN or INTERNAL; afterwards no process exited, no log holds a traceback and a round
still trains (fuzz_deployment.assert_survived).

The round steps (open, close, agree, exchange, clip, commit, abandon) are commands of the
trusted peer: one naming the live round is the protocol itself (party1 abandons the round
party0 says it abandoned), so those are sent well-formed and for rounds far from the live
one (from 1000 on). A committed round is final whatever a peer claims about it.
"""

from __future__ import annotations

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proto.starfish.v1 import peer_pb2, peer_pb2_grpc

from helpers.fuzz_deployment import HINTS, assert_survived
from helpers.fuzz_messages import BAD_CODES, FUZZ, Hints, mutated, random_message, send

METHODS = list(peer_pb2.DESCRIPTOR.services_by_name["PeerService"].methods)
ROUND_STEPS = {
    "OpenRound",
    "CloseRound",
    "AgreeMembership",
    "ExchangeAggregate",
    "ClipRound",
    "CommitRound",
    "AbandonRound",
}
FAR_ROUNDS = Hints(HINTS.names, {"round": st.integers(1000, 2**32 - 1)})


def requests(method) -> st.SearchStrategy[list[bytes]]:
    if method.name in ROUND_STEPS:
        return st.lists(random_message(method.input_type, FAR_ROUNDS), min_size=1, max_size=3)
    one = random_message(method.input_type, HINTS)
    return st.lists(st.one_of(one, one.flatmap(mutated)), min_size=1, max_size=3)


def _peer_channel(deployment, role: int) -> grpc.Channel:
    """A channel to party `role`'s peer port presenting the other party's certificate."""
    certs = deployment.root / "certs"
    caller = f"party{1 - role}"
    creds = grpc.ssl_channel_credentials(
        root_certificates=(certs / "ca.pem").read_bytes(),
        private_key=(certs / f"{caller}.key").read_bytes(),
        certificate_chain=(certs / f"{caller}.pem").read_bytes(),
    )
    port = deployment.creds["ports"][f"peer{role}"]
    return grpc.secure_channel(f"127.0.0.1:{port}", creds)


@pytest.mark.parametrize("role", [0, 1])
@pytest.mark.parametrize("method", METHODS, ids=lambda m: m.name)
def test_random_peer_requests_get_a_clear_status(deployment, method, role):
    with _peer_channel(deployment, role) as channel:

        @FUZZ
        @given(requests(method))
        def check(payloads):
            code = send(channel, method, payloads, ())
            assert code not in BAD_CODES, (method.name, code)

        check()


def test_a_committed_round_stays_committed_whatever_the_peer_claims(deployment):
    with _peer_channel(deployment, 0) as channel:
        stub = peer_pb2_grpc.PeerServiceStub(channel)
        with pytest.raises(grpc.RpcError) as info:
            stub.CommitRound(peer_pb2.CommitRequest(round=1, model_hash=""), timeout=10)
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "round 1 is committed" in info.value.details()
    with deployment.admin() as admin:
        assert {r.round: r.state for r in admin.status().rounds}[1] == "committed"


def test_deployment_survived(deployment):
    assert_survived(deployment)
