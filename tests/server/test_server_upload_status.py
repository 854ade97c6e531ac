"""GetUploadStatus on one party through a round's life (server.upload_status), and the client's
combined view of the two replies (client_sdk.status)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from client_sdk.status import combine
from mpc.fixedpoint import random_ring
from proto.starfish.v1 import client_pb2 as pb
from server.store import Store
from server.upload_status import upload_status


def _state(store: Store, client: str, round_index: int = 1) -> tuple[int, str]:
    reply = upload_status(store, 0, round_index, client)
    return reply.state, reply.reason


def test_states_through_a_round(tmp_path: Path):
    st = Store(tmp_path / "p0", 0)
    h = st.install_initial_model("toy", np.zeros(4, dtype=np.float32), 0.1)
    assert _state(st, "a")[0] == pb.UPLOAD_STATE_NOT_RECEIVED  # round 1 not opened yet
    st.open_round(1, h, deadline=1e12, lr=0.1)
    st.put_upload(1, "a", 3, random_ring(4), random_ring(1), random_ring(1), h, binding_sha256="b" * 64)
    st.put_upload(1, "x", 3, random_ring(4), random_ring(1), random_ring(1), h, binding_sha256="c" * 64)
    assert _state(st, "a") == (pb.UPLOAD_STATE_PENDING, "held; the round is open")
    assert _state(st, "b")[0] == pb.UPLOAD_STATE_NOT_RECEIVED
    st.set_round_state(1, "closed")
    assert _state(st, "a") == (pb.UPLOAD_STATE_PENDING, "held; the round is closing")
    assert _state(st, "b")[0] == pb.UPLOAD_STATE_MISSED
    st.set_membership(1, {"a": 3}, {"x": "the parties hold halves of different sharings (their bindings differ)"})
    assert _state(st, "a")[0] == pb.UPLOAD_STATE_PENDING
    assert _state(st, "x") == (pb.UPLOAD_STATE_EXCLUDED, st.exclusions(1)["x"])
    st.set_round_output(1, "toy", np.ones(4, dtype=np.float32), peer_bytes=0)
    st.commit_round(1)
    reply = upload_status(st, 0, 1, "a")
    assert reply.state == pb.UPLOAD_STATE_COUNTED and reply.binding_sha256 == "b" * 64 and reply.n_samples == 3
    assert reply.round_state == "committed"
    assert _state(st, "b")[0] == pb.UPLOAD_STATE_MISSED


def test_failed_round_is_reported(tmp_path: Path):
    st = Store(tmp_path / "p0", 0)
    h = st.install_initial_model("toy", np.zeros(4, dtype=np.float32), 0.1)
    st.open_round(1, h, deadline=1e12, lr=0.1)
    st.set_round_state(1, "failed", "model hash mismatch in round 1")
    assert _state(st, "a") == (pb.UPLOAD_STATE_ROUND_FAILED, "model hash mismatch in round 1")


def _reply(party: int, state: int, reason: str = "") -> pb.UploadStatus:
    return pb.UploadStatus(party=party, round=1, state=state, reason=reason)


@pytest.mark.parametrize(
    "s0, s1, outcome, final",
    [
        (pb.UPLOAD_STATE_COUNTED, pb.UPLOAD_STATE_PENDING, "counted", True),  # party1 committed first
        (pb.UPLOAD_STATE_EXCLUDED, pb.UPLOAD_STATE_EXCLUDED, "excluded", True),
        (pb.UPLOAD_STATE_MISSED, pb.UPLOAD_STATE_MISSED, "missed", True),
        (pb.UPLOAD_STATE_ROUND_FAILED, pb.UPLOAD_STATE_PENDING, "failed", True),
        (pb.UPLOAD_STATE_PENDING, pb.UPLOAD_STATE_PENDING, "pending", False),
        (pb.UPLOAD_STATE_PENDING, pb.UPLOAD_STATE_MISSED, "pending", False),  # party0 has not agreed yet
        (pb.UPLOAD_STATE_PENDING, pb.UPLOAD_STATE_NOT_RECEIVED, "incomplete", False),
        (pb.UPLOAD_STATE_NOT_RECEIVED, pb.UPLOAD_STATE_NOT_RECEIVED, "not_uploaded", False),
    ],
)
def test_client_view_of_the_two_replies(s0, s1, outcome, final):
    status = combine(1, _reply(0, s0, "zero"), _reply(1, s1, "one"))
    assert status.outcome == outcome and status.final == final


def test_abandoned_round_keeps_the_upload_until_it_can_no_longer_open(tmp_path: Path):
    """Below the minimum cohort: ROUND_FAILED with the reason, round state `abandoned` (the
    SDK keeps the sharing); the round opens again with the upload held; once global model 1
    is an unlearned model instead, the state is `replaced` and the outcome final."""
    st = Store(tmp_path / "p0", 0)
    h = st.install_initial_model("toy", np.zeros(4, dtype=np.float32), 0.1)
    st.open_round(1, h, deadline=1e12, lr=0.1)
    st.put_upload(1, "a", 3, random_ring(4), random_ring(1), random_ring(1), h, binding_sha256="b" * 64)
    st.request_close(1, ["a"])
    why = "round 1 abandoned: the round closed with 1 consistent upload(s), fewer than the minimum cohort 3"
    st.set_round_state(1, "abandoned", why)
    reply = upload_status(st, 0, 1, "a")
    assert (reply.state, reply.reason, reply.round_state) == (pb.UPLOAD_STATE_ROUND_FAILED, why, "abandoned")
    view = combine(1, reply, upload_status(st, 0, 1, "a"))
    assert view.outcome == "abandoned" and not view.final and view.reason == why
    assert st.open_round(1, h, deadline=2e12, lr=0.1).state == "open"  # again, from the same M_0
    assert list(st.uploads(1)) == ["a"] and st.close_request(1) is None and st.round_record(1).error == ""
    assert _state(st, "a") == (pb.UPLOAD_STATE_PENDING, "held; the round is open")
    st.set_round_state(1, "abandoned", why)
    st.install_global_model(1, "toy", np.ones(4, dtype=np.float32), 0.1)  # an unlearning job's model
    reply = upload_status(st, 0, 1, "a")
    assert reply.round_state == "replaced" and "will not open again" in reply.reason
    assert combine(1, reply, reply).final
