"""Round control for an external FL server (`[rounds] opening = "on_request"`), with both
parties as real processes: rounds open only when asked, close as soon as the named clients
uploaded (not every registered client), a round closed below the minimum cohort is
abandoned and opens again with its uploads, the close request survives a SIGKILL of party0,
and the committed model is served to the admin with its hash."""

from __future__ import annotations

import time

import numpy as np
import pytest

from client_sdk.errors import StarfishError
from harness.local import LocalDeployment
from proto.starfish.v1 import client_pb2
from proto.wire import model_hash

pytestmark = pytest.mark.timeout(300)
CLIENTS = ["a", "b", "c", "d"]
M = 8
LR = 0.5


def _gradient(client: str, params: np.ndarray) -> np.ndarray:
    return params * 0.1 + (CLIENTS.index(client) + 1) * 0.01


def _upload(dep: LocalDeployment, client: str, round_index: int) -> None:
    with dep.client(client) as cl:
        cl.register()
        view = cl.wait_for_round(round_index - 1, timeout_s=60)
        assert view.round == round_index
        model = cl.fetch_model(round_index - 1)
        cl.submit(round_index, _gradient(client, model.params), 10 + CLIENTS.index(client), model_hash=model.hash)


@pytest.fixture()
def deployment(tmp_path):
    dep = LocalDeployment(
        tmp_path / "dep", clients=CLIENTS, rounds={"deadline_s": 600.0, "poll_s": 0.05, "opening": "on_request"}
    )
    dep.start()
    try:
        with dep.admin() as admin:
            admin.start_training("toy", np.linspace(-1, 1, M).astype(np.float32), LR)
        yield dep
    finally:
        dep.stop()


def test_rounds_open_on_request_and_close_when_the_named_clients_uploaded(deployment):
    dep = deployment
    with dep.admin() as admin:
        time.sleep(0.5)
        assert admin.status().open_round == 0, "party0 opened a round nobody asked for"
        with pytest.raises(StarfishError, match="cannot open"):
            admin.open_round(2)
        ticket = admin.open_round(1)
        assert (ticket.round, ticket.state) == (1, "open")
        assert admin.open_round(1).round == 1  # a retry returns the same open round
        with pytest.raises(StarfishError, match="unknown client"):
            admin.close_round(1, ["zz"])
        with pytest.raises(StarfishError, match="no upload"):
            admin.close_round(1, [])
        _upload(dep, "a", 1)
        time.sleep(0.5)  # every registered client ("a") uploaded: only a close request may close it now
        assert admin.open_round(1).state == "open"
        _upload(dep, "b", 1)
        with dep.client("d") as cl:
            cl.register()
        below = admin.close_round(1, ["a", "b"], wait_s=60)  # 2 members < the minimum cohort 3
        assert below.state == "abandoned", below
        assert "2 consistent upload(s), fewer than the minimum cohort 3" in below.error
        with dep.client("a") as cl:  # the client is told, on both parties; its upload is kept
            told = cl.upload_status(1)
            assert {s.state for s in told.parties} == {client_pb2.UPLOAD_STATE_ROUND_FAILED}
            assert told.outcome == "abandoned" and not told.final  # the SDK keeps the sharing to resend
            assert "minimum cohort 3" in told.reason and "kept" in told.reason
        with pytest.raises(StarfishError, match="cannot open"):
            admin.open_round(2)  # M_1 does not exist
        assert admin.open_round(1).state == "open"  # opens again from M_0, with a's and b's uploads
        _upload(dep, "c", 1)
        done = admin.close_round(1, ["a", "b", "c"], wait_s=60)  # "d" is registered but not waited for
        assert done.state == "committed", done
        assert {m.client_id: m.n_samples for m in done.members} == {"a": 10, "b": 11, "c": 12}
        header, params = admin.global_model(1)
        assert header.model_hash == done.model_out_hash == model_hash("toy", params)
        m0 = np.linspace(-1, 1, M)
        # k = 3 principals: none may hold more than a third of the weight, so each counts 10
        weighted = 10 * _gradient("a", m0) + 10 * _gradient("b", m0) + 10 * _gradient("c", m0)
        np.testing.assert_allclose(params, m0 - LR * weighted / 30, atol=1e-4)
        assert admin.open_round(1).state == "committed"
        time.sleep(0.5)
        assert admin.status().open_round == 0, "round 2 opened without a request"
        assert admin.list_tasks("no-such-job") == []


def test_a_close_request_survives_a_restart_of_party0(deployment):
    dep = deployment
    with dep.admin() as admin:
        admin.open_round(1)
        _upload(dep, "a", 1)
        _upload(dep, "b", 1)
        admin.close_round(1, ["a", "b", "c"])
    dep.kill(0)
    dep.start(0)
    _upload(dep, "c", 1)
    with dep.admin() as admin:
        done = admin.close_round(1, ["a", "b", "c"], wait_s=60)
        assert done.state == "committed", done
        assert sorted(m.client_id for m in done.members) == ["a", "b", "c"]
