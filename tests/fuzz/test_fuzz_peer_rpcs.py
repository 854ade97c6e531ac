"""Random and mutated requests for every RPC of the peer service, sent to each party with
the other party's certificate (mutual TLS: the caller the service trusts): none ends
UNKNOWN or INTERNAL; afterwards no process exited, no log holds a traceback and a round
still trains (conftest.assert_survived)."""

from __future__ import annotations

import grpc
import pytest
from fuzz_messages import BAD_CODES, FUZZ, mutated, random_message, send
from hypothesis import given
from hypothesis import strategies as st

from proto.starfish.v1 import peer_pb2

from conftest import HINTS, assert_survived

METHODS = list(peer_pb2.DESCRIPTOR.services_by_name["PeerService"].methods)


def requests(method) -> st.SearchStrategy[list[bytes]]:
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


def test_deployment_survived(deployment):
    assert_survived(deployment)
