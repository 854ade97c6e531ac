"""Random and mutated requests for every RPC of the admin service (party0), with the admin
credential, and the client credential on Unlearn (a client may file its own request): none
ends UNKNOWN or INTERNAL; afterwards no process exited, no log holds a traceback and a
round still trains (fuzz_deployment.assert_survived)."""

from __future__ import annotations

import json

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proto.starfish.v1 import admin_pb2
from server.auth import CLIENT_ID_KEY, CLIENT_TOKEN_KEY

from helpers.fuzz_deployment import FUZZ_CLIENT, HINTS, assert_survived
from helpers.fuzz_messages import BAD_CODES, FUZZ, mutated, random_message, send

METHODS = list(admin_pb2.DESCRIPTOR.services_by_name["AdminService"].methods)
NAMES = ["sigma", "B", "recovery_rounds", "eta", "seed", "x"]
#: parameters_json shapes beyond random text: deep nesting, long documents, odd values
PARAMETER_TEXTS = st.one_of(
    st.integers(1, 200_000).map(lambda n: "[" * n),
    st.integers(1, 50_000).map(lambda n: '{"sigma": ' + "[" * n + "]" * n + "}"),
    st.dictionaries(st.sampled_from(NAMES), st.floats() | st.integers()).map(json.dumps),
)


def requests(method) -> st.SearchStrategy[list[bytes]]:
    one = random_message(method.input_type, HINTS)
    return st.lists(st.one_of(one, one.flatmap(mutated)), min_size=1, max_size=3)


def _channel(deployment, admin: bool = True) -> grpc.Channel:
    """The admin API's own port, or (a client's own unlearning) the client port."""
    creds = grpc.ssl_channel_credentials(root_certificates=deployment.ca_cert.read_bytes())
    address = deployment.admin_address if admin else deployment.address(0)
    return grpc.secure_channel(address, creds, options=[("grpc.max_send_message_length", 8 << 20)])


@pytest.mark.parametrize("method", METHODS, ids=lambda m: m.name)
def test_random_admin_requests_get_a_clear_status(deployment, method):
    with _channel(deployment) as channel:

        @FUZZ
        @given(requests(method))
        def check(payloads):
            code = send(channel, method, payloads, deployment.admin_metadata)
            assert code not in BAD_CODES, (method.name, code)

        check()


@pytest.mark.parametrize("as_client", [False, True], ids=["admin", "client"])
def test_unlearn_parameters_get_a_clear_status(deployment, as_client):
    method = admin_pb2.DESCRIPTOR.services_by_name["AdminService"].methods_by_name["Unlearn"]
    token = deployment.creds["clients"][FUZZ_CLIENT]
    metadata = ((CLIENT_ID_KEY, FUZZ_CLIENT), (CLIENT_TOKEN_KEY, token)) if as_client else deployment.admin_metadata
    with _channel(deployment, admin=not as_client) as channel:

        @FUZZ
        @given(PARAMETER_TEXTS)
        def check(text):
            request = admin_pb2.UnlearnRequest(targets=[FUZZ_CLIENT], parameters_json=text)
            code = send(channel, method, [request.SerializeToString()], metadata)
            assert code not in BAD_CODES and code != grpc.StatusCode.OK, code

        check()


def test_deployment_survived(deployment):
    assert_survived(deployment)
