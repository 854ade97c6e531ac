"""One process acting for many Flower nodes (a simulation actor): `StarfishMod` opens its TLS
channels to the two parties once and every node's calls use them, each with its own
credential — against party0 and party1 as real processes."""

from __future__ import annotations

import time

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MessageType, Metadata, MetricRecord, RecordDict

from harness.local import LocalDeployment
from server.store import Store
from starfish_flower import Parties, StarfishMod, keys, mod
from starfish_flower.parties import identity_from_credentials

pytestmark = pytest.mark.timeout(300)
M = 32
IDS = ["n0", "n1", "n2"]


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    dep = LocalDeployment(
        tmp_path_factory.mktemp("mod") / "dep", clients=IDS, rounds={"opening": "on_request", "deadline_s": 600.0}
    )
    dep.start()
    with dep.admin() as admin:
        admin.start_training("toy", np.zeros(M, np.float32), 1.0)
        admin.open_round(1)
    yield dep
    dep.stop()


def _train_message(node: int) -> tuple[Message, Context]:
    config = ConfigRecord({keys.ROUND: 1, keys.LR: 1.0, keys.ARCH: "toy"})
    content = RecordDict({"arrays": ArrayRecord({"w": Array(np.zeros(M, np.float32))}), "config": config})
    metadata = Metadata(1, f"m{node}", 0, node + 1, "", "", time.time(), 3600.0, MessageType.TRAIN)
    context = Context(run_id=1, node_id=node + 1, node_config={"partition-id": node}, state=RecordDict(), run_config={})
    return Message(content=content, metadata=metadata), context


def _train(msg: Message, context: Context) -> Message:
    fitted = np.full(M, -0.01 * (context.node_id), np.float32)
    content = RecordDict({"arrays": ArrayRecord({"w": Array(fitted)}), "metrics": MetricRecord({"num-examples": 5})})
    return Message(content, reply_to=msg)


def _stored(dep: LocalDeployment, client: str) -> list[bool]:
    return [client in Store(dep.data_dir(r), r, readonly=True).uploads(1) for r in (0, 1)]


def test_nodes_of_one_process_share_its_channels_and_each_uploads_as_itself(deployment, tmp_path, monkeypatch):
    monkeypatch.setenv("STARFISH_OUTBOX", str(tmp_path / "outbox"))
    parties = Parties(deployment.address(0), deployment.address(1), deployment.ca_cert)
    starfish = StarfishMod(parties, identity_from_credentials(deployment.cred_path, "n{partition-id}"))
    before = dict(mod._CHANNELS)
    for node in (0, 1):  # never registered: each registers beside its round check, then uploads
        reply = starfish(*_train_message(node), _train)
        assert not reply.has_error(), reply.error.reason
        assert reply.content[keys.REPLY][keys.CLIENT_ID] == f"n{node}"
        assert _stored(deployment, f"n{node}") == [True, True]
    opened = {k: v for k, v in mod._CHANNELS.items() if k not in before}
    assert len(opened) == 1  # one pair of channels for this deployment, kept open after each client closed
    (channels,) = opened.values()
    assert channels.serves(deployment.address(0), deployment.address(1), deployment.ca_cert.read_bytes())

    # a node holding a wrong token uses the same channels and is refused: no upload in its name
    imposter = StarfishMod(parties, lambda context: ("n2", "not-the-token"))
    reply = imposter(*_train_message(2), _train)
    assert reply.has_error() and "rejected client 'n2'" in reply.error.reason
    assert _stored(deployment, "n2") == [False, False]
    assert {k: v for k, v in mod._CHANNELS.items() if k not in before} == opened


def test_a_client_refuses_shared_channels_to_other_parties(deployment):
    from client_sdk import Client
    from client_sdk.channels import PartyChannels

    ca = deployment.ca_cert.read_bytes()
    shared = PartyChannels(deployment.address(0), deployment.address(1), ca)
    try:
        with pytest.raises(ValueError, match="other parties"):
            Client("n0", "t", deployment.address(1), deployment.address(0), ca, channels=shared)
    finally:
        shared.close()
