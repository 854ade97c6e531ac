"""The party services over real TLS gRPC: every malformed or unauthorised request is refused
with a status and message naming the problem, and nothing already stored is lost."""

from __future__ import annotations

import time

import grpc
import numpy as np
import pytest

from client_sdk import StarfishError, UploadRejectedError
from mpc.fixedpoint import random_ring, to_wire
from proto.starfish.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    client_pb2,
    client_pb2_grpc,
    common_pb2,
    peer_pb2,
    peer_pb2_grpc,
)
from server.store import Store, TaskRecord

from helpers.server_fixtures import (
    M,
    admin_channel,
    client_channel,
    metadata,
    raw_upload,
    ring_scalar,
    round_view,
    upload_header,
)

pytestmark = pytest.mark.timeout(300)


def _refused(code: grpc.StatusCode, match: str, fn, *args, **kw):
    with pytest.raises(grpc.RpcError) as info:
        fn(*args, **kw)
    assert info.value.code() == code, info.value.details()
    assert match in info.value.details()


def test_round_state_is_served_with_encoding(parties):
    state = round_view(parties)
    assert state.phase == common_pb2.ROUND_PHASE_OPEN and state.round == 1
    assert state.precision_bits == 16 and len(state.model_hash) == 64


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"dtype": "float32"}, "dtype must be 'int64'"),
        ({"shape": [M + 1]}, "does not match the model"),
        ({"shape": [M, 1]}, "does not match the model"),
        ({"data": to_wire(random_ring(M - 1))}, "expected"),
        ({"data": to_wire(random_ring(M + 3))}, "longer than"),
        ({"content_sha256": "0" * 64}, "content_sha256"),
        ({"n_samples": 0}, "n_samples"),
        ({"norm_share": common_pb2.Tensor(shape=[2], dtype="int64", data=b"\0" * 16)}, "norm share"),
        ({"delta_share": common_pb2.Tensor(shape=[1], dtype="float64", data=b"\0" * 8)}, "delta share"),
        ({"mask_seed": b"s" * 5}, "mask seed must be 33 bytes"),
        ({"mask_seed": b"s" * 32}, "retired untagged SHAKE-256"),
        ({"mask_seed": b"\x07" + b"s" * 32}, "unknown generator tag 0x07"),
        ({"mask_seed": b"\x01" + b"s" * 32}, "carries no share data"),
    ],
)
def test_malformed_upload_is_invalid_argument(parties, kw, match):
    _refused(grpc.StatusCode.INVALID_ARGUMENT, match, raw_upload, parties, 1, "c2", **kw)


def test_upload_without_or_against_its_binding_is_refused(parties):
    data = to_wire(random_ring(M))
    unbound = upload_header(parties, 0, data)
    unbound.ClearField("binding")
    _refused(grpc.StatusCode.INVALID_ARGUMENT, "no share binding", raw_upload, parties, 0, "c2", data, header=unbound)
    for field in ("sharing_id", "nonce"):  # any change to the binding breaks party0's commitment
        header = upload_header(parties, 0, data)
        setattr(header.binding, field, bytes(len(getattr(header.binding, field))))
        _refused(
            grpc.StatusCode.INVALID_ARGUMENT,
            "does not match its commitment",
            raw_upload,
            parties,
            0,
            "c2",
            data,
            header=header,
        )
    header = upload_header(parties, 0, data)  # a half sent to the party the commitment was not made for
    _refused(
        grpc.StatusCode.INVALID_ARGUMENT,
        "does not match its commitment",
        raw_upload,
        parties,
        1,
        "c2",
        data,
        header=header,
    )
    assert "c2" not in round_view(parties).uploaded


def test_malformed_uploads_store_nothing(parties):
    with pytest.raises(grpc.RpcError):
        raw_upload(parties, 0, "c2", dtype="float32")
    assert "c2" not in round_view(parties).uploaded


def test_unknown_client_wrong_token_and_impersonation(parties):
    _refused(grpc.StatusCode.UNAUTHENTICATED, "unknown client", raw_upload, parties, 0, "mallory", token="x")
    _refused(grpc.StatusCode.UNAUTHENTICATED, "wrong credential", raw_upload, parties, 0, "c1", token="guess")
    # c0's valid token does not let it act as c1
    _refused(
        grpc.StatusCode.UNAUTHENTICATED,
        "wrong credential",
        raw_upload,
        parties,
        1,
        "c1",
        token=parties.creds["clients"]["c0"],
    )
    with client_channel(parties, 0) as ch:
        _refused(
            grpc.StatusCode.UNAUTHENTICATED,
            "missing client credentials",
            client_pb2_grpc.ClientServiceStub(ch).GetRound,
            client_pb2.GetRoundRequest(),
        )


def test_unregistered_client_and_wrong_round_and_wrong_model(parties):
    _refused(grpc.StatusCode.FAILED_PRECONDITION, "not registered", raw_upload, parties, 0, "c5")
    _refused(grpc.StatusCode.FAILED_PRECONDITION, "round 7 is not open", raw_upload, parties, 0, "c1", round=7)
    _refused(
        grpc.StatusCode.FAILED_PRECONDITION, "computed at model", raw_upload, parties, 0, "c1", model_hash="ab" * 32
    )


def test_duplicate_is_idempotent_and_conflict_is_rejected(parties):
    data = to_wire(random_ring(M))
    norm, delta = ring_scalar(), ring_scalar()
    header = upload_header(parties, 0, data, norm_share=norm, delta_share=delta)
    first = raw_upload(parties, 0, "c1", data=data, header=header)
    again = raw_upload(parties, 0, "c1", data=data, header=header)
    assert not first.duplicate and again.duplicate and again.content_sha256 == first.content_sha256
    # the same bytes as the half of another sharing (another binding): a different upload
    rebound = upload_header(parties, 0, data, norm_share=norm, delta_share=delta)
    _refused(grpc.StatusCode.ALREADY_EXISTS, "cannot be replaced", raw_upload, parties, 0, "c1", data, header=rebound)
    _refused(
        grpc.StatusCode.ALREADY_EXISTS,
        "cannot be replaced",
        raw_upload,
        parties,
        0,
        "c1",
        norm_share=norm,
        delta_share=delta,
    )
    stored = Store(parties.data_dir(0), 0, readonly=True).load_share(1, "c1")
    assert to_wire(stored.gradient) == data
    log = (parties.root / "logs" / "party0.log").read_text()  # the operator sees each refusal and why
    assert "party0 refused the upload of c1 for round 1 (ALREADY_EXISTS): a different upload for round 1" in log


def test_oversized_message_is_refused(parties):
    big = to_wire(random_ring(5 * 1024 * 1024 // 8))
    _refused(grpc.StatusCode.RESOURCE_EXHAUSTED, "", raw_upload, parties, 0, "c2", data=big, chunk=len(big))


def test_the_client_port_refuses_the_admin_api(parties):
    """The admin token is never accepted on the client port; a client's own unlearning
    request still reaches the service there (refused for the wrong target, not by the gate)."""
    with client_channel(parties, 0) as ch:
        stub = admin_pb2_grpc.AdminServiceStub(ch)
        for call, request in ((stub.GetTrainingStatus, admin_pb2.TrainingStatusRequest()), (stub.ListJobs, None)):
            with pytest.raises(grpc.RpcError) as err:
                call(request or admin_pb2.ListJobsRequest(), metadata=parties.admin_metadata, timeout=10)
            assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert f"admin_listen {parties.admin_address}" in err.value.details()
        with pytest.raises(grpc.RpcError) as err:
            stub.Unlearn(admin_pb2.UnlearnRequest(targets=["c1"]), metadata=parties.admin_metadata, timeout=10)
        assert "not served on the client port" in err.value.details()
        with pytest.raises(grpc.RpcError) as err:
            stub.Unlearn(admin_pb2.UnlearnRequest(targets=["c1"]), metadata=metadata(parties, "c0"), timeout=10)
        assert "only request its own" in err.value.details()


def test_admin_requires_admin_credential(parties):
    with admin_channel(parties) as ch:
        stub = admin_pb2_grpc.AdminServiceStub(ch)
        _refused(
            grpc.StatusCode.PERMISSION_DENIED,
            "admin credential",
            stub.GetTrainingStatus,
            admin_pb2.TrainingStatusRequest(),
        )
        _refused(
            grpc.StatusCode.PERMISSION_DENIED,
            "admin credential",
            stub.Erase,
            admin_pb2.EraseRequest(client_id="c1"),
            metadata=(("x-starfish-admin-token", parties.creds["clients"]["c0"]),),
        )
        status = stub.GetTrainingStatus(admin_pb2.TrainingStatusRequest(), metadata=parties.admin_metadata)
        assert status.open_round == 1 and sorted(status.registered) == [f"c{i}" for i in range(5)]


def _peer_channel(dep, target: int, as_party: int | None) -> grpc.Channel:
    certs = dep.root / "certs"
    if as_party is None:
        creds = grpc.ssl_channel_credentials(root_certificates=(certs / "ca.pem").read_bytes())
    else:
        creds = grpc.ssl_channel_credentials(
            (certs / "ca.pem").read_bytes(),
            (certs / f"party{as_party}.key").read_bytes(),
            (certs / f"party{as_party}.pem").read_bytes(),
        )
    return grpc.secure_channel(f"127.0.0.1:{dep.creds['ports'][f'peer{target}']}", creds)


def test_peer_port_needs_the_other_partys_certificate(parties):
    with _peer_channel(parties, 1, None) as ch:  # no client certificate: TLS handshake fails
        with pytest.raises(grpc.RpcError) as info:
            peer_pb2_grpc.PeerServiceStub(ch).ListUploads(peer_pb2.RoundRef(round=1), timeout=5)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    with _peer_channel(parties, 1, 1) as ch:  # party1's own certificate is not party0's
        _refused(
            grpc.StatusCode.PERMISSION_DENIED,
            "must come from 'party0'",
            peer_pb2_grpc.PeerServiceStub(ch).ListUploads,
            peer_pb2.RoundRef(round=1),
            timeout=5,
        )


@pytest.mark.parametrize("kind", [client_pb2.TASK_KIND_CORRECTION, client_pb2.TASK_KIND_RECOVERY])
def test_tasks_reach_the_sdk_and_answers_are_stored_as_shares(parties, kind):
    """A task stored on both parties (as each party's job runner posts it) is answered through serve_tasks."""
    from mpc.fixedpoint import reconstruct

    state = round_view(parties)
    task = TaskRecord(
        task_id=f"t-{kind}",
        client="c3",
        job_id="job-1",
        kind=kind,
        unlearning_round=4,
        original_round=1,
        model_hash=state.model_hash,
        deadline=time.time() + 60,
    )
    for role in (0, 1):  # a second connection to the running party's store; WatchTasks polls it
        store = Store(parties.data_dir(role), role)
        store.put_task(task)
        store.close()
    seen = []
    expected = np.linspace(-0.5, 0.5, M)

    def grad_fn(params, task):
        seen.append((task.task_id, task.kind, task.original_round, params.size))
        return expected, 17

    with parties.client("c3") as client:
        assert client.serve_tasks(grad_fn, max_tasks=1) == 1
    assert seen == [(f"t-{kind}", kind, 1, M)]
    b0 = Store(parties.data_dir(0), 0, readonly=True).load_task_share(f"t-{kind}")
    b1 = Store(parties.data_dir(1), 1, readonly=True).load_task_share(f"t-{kind}")
    assert b0.n_samples == b1.n_samples == 17
    assert np.allclose(reconstruct(b0.gradient, b1.gradient), expected, atol=2.0**-16)
    assert not np.allclose(b0.gradient.astype(np.float64) / 2**16, expected, atol=1e-3)


@pytest.mark.parametrize(
    "lr, bad_value, match",
    [
        (float("inf"), None, "learning rate must be a finite number in (0, 10]"),
        (float("nan"), None, "learning rate"),
        (0.0, None, "learning rate"),
        (-0.5, None, "learning rate"),
        (100.0, None, "limits.max_lr"),
        (0.1, float("nan"), "1 non-finite parameter(s)"),
        (0.1, float("-inf"), "1 non-finite parameter(s)"),
    ],
)
def test_start_training_refuses_non_finite_or_out_of_range_inputs(parties, lr, bad_value, match):
    params = np.zeros(M, dtype=np.float32)
    if bad_value is not None:
        params[3] = bad_value
    with parties.admin() as admin:
        with pytest.raises(StarfishError, match="INVALID_ARGUMENT") as info:
            admin.start_training("toy", params, lr)
    assert match in str(info.value)


def test_sample_count_that_could_wrap_the_aggregate_is_refused_and_a_corrected_one_counts(parties):
    """n_j = 10^9 with |g| up to 2^20 at f = 16 could wrap the int64 aggregate: both parties refuse it
    (n_j ≤ limits.max_samples = 10^6 ≤ the round's sample budget), and the SDK forgets the refused
    sharing so that the corrected call goes through."""
    g = np.zeros(M)
    g[0] = 2.0e5  # |g| = 2e5 (and ‖g‖ within the encodable range)
    with parties.client("c4") as c:
        with pytest.raises(UploadRejectedError, match=r"n_samples must be in \[1, 1000000\], got 1000000000"):
            c.submit(1, g, 10**9)
        assert c.pending_uploads() == []
        receipt = c.submit(1, g, 7)
    assert receipt.round == 1 and not receipt.resumed
    for party in (0, 1):
        assert Store(parties.data_dir(party), party, readonly=True).upload(1, "c4").n_samples == 7
