"""Two running deployments for the SDK tests: `sdk_parties` (clients a0..a3 registered,
round 1 open with a long deadline) and `sdk_twin`, a party1 with the same certificates
and credentials but a different initial model (to catch a party serving another model)."""

from __future__ import annotations

import grpc
import numpy as np
import pytest

from harness.local import LocalDeployment
from proto.starfish.v1 import common_pb2, peer_pb2_grpc
from proto.wire import model_hash, model_messages

M = 48


def _deploy(root, m0: np.ndarray) -> LocalDeployment:
    dep = LocalDeployment(root, clients=["a0", "a1", "a2", "a3", "a4"], rounds={"deadline_s": 3600.0, "poll_s": 0.05})
    dep.start()
    admin = dep.admin()
    admin.start_training("toy", m0, 0.1)
    admin.close()
    with dep.client("a0") as c:
        c.wait_for_round(0, timeout_s=90)  # both parties hold M_0 and round 1 is open
    return dep


@pytest.fixture(scope="session")
def sdk_parties(tmp_path_factory):
    dep = _deploy(tmp_path_factory.mktemp("sdk"), np.zeros(M, dtype=np.float32))
    for c in ("a0", "a1", "a2", "a3"):
        with dep.client(c) as cl:
            cl.register()
    yield dep
    dep.stop()


@pytest.fixture(scope="session")
def sdk_twin(tmp_path_factory, sdk_parties):
    """Only a party1, with the same identity, given another M_0 over its peer API (acting as party0)."""
    dep = LocalDeployment(tmp_path_factory.mktemp("twin"), clients=["a0"], same_identity_as=sdk_parties)
    dep.start(1)
    certs = dep.root / "certs"
    creds = grpc.ssl_channel_credentials(
        (certs / "ca.pem").read_bytes(), (certs / "party0.key").read_bytes(), (certs / "party0.pem").read_bytes()
    )
    m0 = np.ones(M, dtype=np.float32)
    header = common_pb2.ModelHeader(arch="toy", num_params=M, model_hash=model_hash("toy", m0), lr=0.1)
    with grpc.secure_channel(f"127.0.0.1:{dep.creds['ports']['peer1']}", creds) as ch:
        peer_pb2_grpc.PeerServiceStub(ch).InitModel(model_messages(header, m0, 1024), timeout=20)
    yield dep
    dep.stop()
