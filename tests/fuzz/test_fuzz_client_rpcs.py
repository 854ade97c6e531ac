"""Random and mutated requests for every RPC of the client service (party0 and party1), sent
with the fuzz client's valid credential: none ends UNKNOWN or INTERNAL; afterwards no
process exited, no log holds a traceback and a round still trains (fuzz_deployment.assert_survived)."""

from __future__ import annotations

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proto.starfish.v1 import client_pb2
from server.auth import CLIENT_ID_KEY, CLIENT_TOKEN_KEY

from helpers.fuzz_deployment import FUZZ_CLIENT, HINTS, assert_survived
from helpers.fuzz_messages import BAD_CODES, FUZZ, mutated, random_message, send

METHODS = list(client_pb2.DESCRIPTOR.services_by_name["ClientService"].methods)


def requests(method) -> st.SearchStrategy[list[bytes]]:
    one = random_message(method.input_type, HINTS)
    return st.lists(st.one_of(one, one.flatmap(mutated)), min_size=1, max_size=3)


@pytest.mark.parametrize("role", [0, 1])
@pytest.mark.parametrize("method", METHODS, ids=lambda m: m.name)
def test_random_client_requests_get_a_clear_status(deployment, method, role):
    creds = grpc.ssl_channel_credentials(root_certificates=deployment.ca_cert.read_bytes())
    metadata = ((CLIENT_ID_KEY, FUZZ_CLIENT), (CLIENT_TOKEN_KEY, deployment.creds["clients"][FUZZ_CLIENT]))
    with grpc.secure_channel(deployment.address(role), creds) as channel:

        @FUZZ
        @given(requests(method))
        def check(payloads):
            code = send(channel, method, payloads, metadata)
            assert code not in BAD_CODES, (method.name, code)

        check()


def test_deployment_survived(deployment):
    assert_survived(deployment)
