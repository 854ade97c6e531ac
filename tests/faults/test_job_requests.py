"""Bounded unlearn requests, duplicate requests and the admin's CancelJob, on the real service
(party0, party1 and the dealer as processes on loopback; SDK clients in threads).

One trained service for the module (3 Stage I rounds, training goes on afterwards). The
clients answer no task after Stage I, so a job's session blocks on its first warm-up task
until it is cancelled:

* `parameters_json` nested 100,000 (or 5,000) levels deep is refused with INVALID_ARGUMENT
  naming the bound, before the JSON parser runs (a client credential suffices to send it);
  party0 logs no traceback;
* `recovery_rounds = 1000` is refused, naming the operator bound and its config key;
* the same request filed again while its job is queued or running gets that job's id; one
  sharing a target with other parameters is refused naming the job;
* CancelJob of a queued job ends it at once; CancelJob of a running job stops both parties'
  workers, the dealer ends the session, both parties drop the job's checkpoints, the job is
  CANCELLED with a report, and training resumes: the next round commits.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from pathlib import Path

import grpc
import pytest

from client_sdk import StarfishError
from proto.starfish.v1 import admin_pb2, admin_pb2_grpc
from server.auth import CLIENT_ID_KEY, CLIENT_TOKEN_KEY

from helpers.polling import poll
from helpers.stage2_fixtures import TrainedService

CLIENTS = [f"c{i}" for i in range(5)]
ROUNDS = 3
PARAMS = {"beta": 0.5}
pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    svc = TrainedService.create(
        tmp_path_factory.mktemp("jobrequests"),
        CLIENTS,
        rounds=ROUNDS,
        round_cfg={"max_rounds": 0},
        jobs={"task_timeout_s": 300.0, "pause_training_after_s": 1.0},
        unlearning={"parameters": PARAMS},
    )
    for cid in CLIENTS:
        svc.unserve(cid)  # nobody answers a job's tasks: a job blocks until cancelled
    yield svc
    svc.stop()


def _unlearn_raw(service, targets: list[str], parameters_json: str, client: str | None = None) -> grpc.RpcError:
    """An Unlearn call with raw `parameters_json` (admin, or `client`'s own credential); must fail."""
    dep = service.dep
    if client is None:
        metadata = dep.admin_metadata
    else:
        metadata = ((CLIENT_ID_KEY, client), (CLIENT_TOKEN_KEY, dep.creds["clients"][client]))
    creds = grpc.ssl_channel_credentials(root_certificates=dep.ca_cert.read_bytes())
    address = dep.admin_address if client is None else dep.address(0)  # a client's own request: its port
    with grpc.secure_channel(address, creds, options=[("grpc.max_send_message_length", 8 << 20)]) as ch:
        stub = admin_pb2_grpc.AdminServiceStub(ch)
        request = admin_pb2.UnlearnRequest(targets=targets, parameters_json=parameters_json)
        with pytest.raises(grpc.RpcError) as info:
            stub.Unlearn(request, metadata=metadata, timeout=30)
    return info.value


def _party_log(service, role: int) -> str:
    return (service.dep.root / "logs" / f"party{role}.log").read_text(errors="replace")


@pytest.mark.parametrize(
    "client,text,why",
    [
        ("c0", "[" * 100_000, "at most 16384 bytes"),
        (None, "[" * 5000, "nests 5000 levels deep; at most 4 levels"),
        (None, '{"sigma": ' + "[" * 3000 + "]" * 3000 + "}", "nests 3001 levels deep"),
        (None, "{" * 100_000, "at most 16384 bytes"),
    ],
)
def test_deeply_nested_parameters_are_refused_with_invalid_argument(service, client, text, why):
    error = _unlearn_raw(service, ["c0"], text, client)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (error.code(), error.details())
    assert "parameters_json" in error.details() and why in error.details()
    assert "Traceback" not in _party_log(service, 0)


def test_recovery_rounds_beyond_the_operator_bound_is_refused(service):
    error = _unlearn_raw(service, ["c0"], json.dumps({"recovery_rounds": 1000}))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "recovery_rounds = 1000 is outside the operator's bounds [0, 20]" in error.details()
    assert "[unlearning.bounds] recovery_rounds" in error.details()
    with service.dep.admin() as admin:
        assert not admin.list_jobs().jobs  # nothing queued


def _worker_pid(service, role: int, job_id: str, timeout_s: float = 180) -> int:
    """The pid of party `role`'s worker for the job, once it runs."""
    path = service.job_dir(role, job_id) / "worker.pid"

    def pid() -> int | None:
        try:
            return int(path.read_text())
        except (FileNotFoundError, ValueError):
            return None

    found = poll(pid, timeout_s)
    if found is None:
        raise AssertionError(f"party{role} started no worker for {job_id}")
    return found


def _gone(pid: int, timeout_s: float = 20) -> bool:
    def exited() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False

    return poll(exited, timeout_s) is not None


def _await_log(path: Path, text: str, timeout_s: float = 30) -> bool:
    return poll(lambda: text in path.read_text(errors="replace"), timeout_s) is not None


def _party1_job_state(service, job_id: str) -> str:
    db = sqlite3.connect(f"file:{service.dep.data_dir(1) / 'jobs' / 'jobs.sqlite'}?mode=ro", uri=True)
    try:
        row = db.execute("SELECT state FROM jobs WHERE job_id=?", (job_id,)).fetchone()
    finally:
        db.close()
    return row[0] if row else "unknown"


def _train_one_round(service) -> int:
    """Every client uploads to the next round; returns the round, once committed."""
    with service.dep.admin() as admin:
        before = admin.status().latest_committed
    errors: list[BaseException] = []

    def upload(cid: str) -> None:
        try:
            with service.dep.client(cid) as client:
                client.run_round(
                    lambda p: (service.problem.gradient(cid, p), service.problem.n(cid)), after=before, timeout_s=120
                )
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=upload, args=(c,)) for c in CLIENTS]
    for t in threads:
        t.start()
    for t in threads:
        t.join(150)
    assert not errors, errors
    with service.dep.admin() as admin:
        poll(lambda: admin.status().latest_committed > before, 60)
        return admin.status().latest_committed


def test_duplicates_answered_with_the_job_and_cancel_stops_it_cleanly(service):
    with service.dep.admin() as admin:
        job_id = admin.unlearn(["c0"], parameters=PARAMS)
        assert admin.unlearn(["c0"], parameters=PARAMS) == job_id  # the same request: the same job
        with pytest.raises(StarfishError, match=f"FAILED_PRECONDITION.*{job_id}"):
            admin.unlearn(["c0"], parameters={**PARAMS, "sigma": 0.5})
        pids = {role: _worker_pid(service, role, job_id) for role in (0, 1)}
        dealer_log = service.dep.root / "logs" / "dealer.log"
        for rank in (0, 1):  # cancel mid-session: both workers hold the dealer session
            assert _await_log(dealer_log, f"joined session {job_id}.1 as party {rank}", 120), rank
        assert admin.unlearn(["c0"], parameters=PARAMS) == job_id  # running: still the same job
        queued = admin.unlearn(["c1"], parameters=PARAMS)
        assert admin.job_status(queued).state == admin_pb2.JOB_STATE_QUEUED
        assert admin.cancel_job(queued).state == admin_pb2.JOB_STATE_CANCELLED
        assert admin.job_status(job_id).state == admin_pb2.JOB_STATE_RUNNING  # the running job goes on

        final = admin.cancel_job(job_id)
        assert final.state == admin_pb2.JOB_STATE_CANCELLED and "cancelled by the admin" in final.error
        with pytest.raises(StarfishError, match="FAILED_PRECONDITION.*already ended"):
            admin.cancel_job(job_id)
        report = json.loads(admin.job_report(job_id).report_json)
        assert report["job"]["state"] == "cancelled" and report["cancellation"]["by"] == "admin"
        assert "cancelled by the admin" in admin.job_report(job_id).summary
        certificate = admin.job_certificate(job_id)  # `admin report --html` asks for it first
        assert not certificate.certificate_json and certificate.status == "cancelled"
        assert "erased nothing" in certificate.detail
        listed = {j.job_id: j.state for j in admin.list_jobs().jobs}
        assert listed == {job_id: admin_pb2.JOB_STATE_CANCELLED, queued: admin_pb2.JOB_STATE_CANCELLED}

    assert all(_gone(pid) for pid in pids.values()), pids  # both parties' workers stopped
    assert _await_log(dealer_log, f"session {job_id}.1 aborted")  # the dealer ended the session
    assert _party1_job_state(service, job_id) == "cancelled"
    for role in (0, 1):
        leftover = service.job_dir(role, job_id) / "checkpoints"
        assert not leftover.exists() or not any(leftover.iterdir()), role
    assert _train_one_round(service) > ROUNDS  # training resumed on both parties
    for role in (0, 1):
        assert "Traceback" not in _party_log(service, role)
