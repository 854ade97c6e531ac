"""Fault injection in Stage II jobs (real processes): party1's worker and the dealer
service are killed in the middle of a job (the dealer's operator then restarts it); the
job resumes in a fresh session from the last checkpoint both parties hold and ends with
the model of the plaintext run. Client c5
never answers its tasks: every task of it times out, the estimate is kept and the report
says so (both parties decide alike; the run still equals the plaintext reference). Its
deadline also keeps each task round open long enough to kill a process mid-job. Uses the
shared trained service `stage2`.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable

import pytest

from proto.starfish.v1 import admin_pb2

from helpers.plumbing_schedule import PLUMBING_SCHEDULE
from helpers.stage2_fixtures import plaintext_reference, relative_gap

SILENT = "c5"
#: the plumbing schedule; compared draw for draw with a plaintext run (no secret noise)
PARAMS = {"beta": 0.25, "anchor_noise": False, **PLUMBING_SCHEDULE}
JOB_TIMEOUT_S = 200
KILL_AFTER_ROUND = 2


@pytest.fixture
def service(stage2):
    return stage2


def _kill_mid_job(admin, job_id: str, pid: Callable[[], int]) -> int:
    """SIGKILL the process `pid()` names once the job checkpointed round KILL_AFTER_ROUND."""
    for status in admin.watch_job(job_id, timeout_s=JOB_TIMEOUT_S):
        assert status.state in (admin_pb2.JOB_STATE_QUEUED, admin_pb2.JOB_STATE_RUNNING), status.error
        if status.unlearning_round >= KILL_AFTER_ROUND and status.step != "done":
            victim = pid()
            os.kill(victim, signal.SIGKILL)
            return victim
    raise AssertionError("the job ended before it could be interrupted")


def _check_resumed_run(service, admin, job_id: str, erased_before: frozenset[str]) -> dict:
    final = admin.wait_job(job_id, JOB_TIMEOUT_S)
    assert final.state == admin_pb2.JOB_STATE_SUCCEEDED, final.error
    report = json.loads(admin.job_report(job_id).report_json)
    assert report["job"]["session_attempts"] >= 2
    assert report["resumed_at"] and min(report["resumed_at"]) >= KILL_AFTER_ROUND - 1
    _, model = admin.job_model(job_id)
    reference, ref_report = plaintext_reference(service, report, erased_before)
    assert report["selection"] == ref_report["selection"]
    assert report["flags"] == ref_report["flags"]
    assert relative_gap(model, reference.numpy()) <= 1e-3
    events = report["corrections"]["events"]
    assert events and all(e["answered"] for e in events)
    assert all(SILENT in e["missing"] and SILENT not in e["answered"] for e in events)
    return report


@pytest.mark.timeout(JOB_TIMEOUT_S + 60)
def test_job_resumes_after_party1_worker_is_killed(service):
    erased_before = frozenset(service.erased)
    with service.dep.admin() as admin, service.silenced(SILENT):
        job_id = admin.unlearn(["c0"], parameters=PARAMS)
        pid_file = service.dep.data_dir(1) / "jobs" / job_id / "worker.pid"
        killed = _kill_mid_job(admin, job_id, lambda: int(pid_file.read_text()))
        report = _check_resumed_run(service, admin, job_id, erased_before)
        service.erased.append("c0")
        assert int(pid_file.read_text()) != killed  # party1 started a new worker
        assert sorted(r["party"] for r in report["erasure"]["c0"]) == [0, 1]


@pytest.mark.timeout(JOB_TIMEOUT_S + 60)
def test_job_resumes_after_the_dealer_service_is_killed_and_restarted(service):
    erased_before = frozenset(service.erased)
    dep = service.dep
    with dep.admin() as admin, service.silenced(SILENT):
        job_id = admin.unlearn(["c1"], parameters=PARAMS)
        killed = _kill_mid_job(admin, job_id, lambda: dep.dealer_proc.pid)
        dep.dealer_proc.wait(10)
        dep.start_dealer()  # its operator restarts it (systemd's Restart=on-failure)
        report = _check_resumed_run(service, admin, job_id, erased_before)
        service.erased.append("c1")
    assert dep.dealer_proc.pid != killed
    sessions = report["dealer"]["sessions"]
    assert len(sessions) == report["job"]["session_attempts"] >= 2
    assert len({s["session_id"] for s in sessions}) == len(sessions)  # every attempt is a fresh session
