"""The worker process (server.workers.worker): it runs the session module the party names
and refuses a spec of another kind of session, with a real worker process."""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path

import pytest

from server.jobs.runner import JOB_SESSION_MODULE
from server.stage1_clip import CLIP_SESSION_MODULE, STAGE1_CLIP
from server.workers.process import Standby, WorkerProcess, WorkerSpec, spawn_worker
from server.workers.worker import EXIT_FAILED, load_session_module

START_S = 120.0  #: the worker imports torch and CrypTen before it reads its spec


def _spec(folder: Path, task: str) -> WorkerSpec:
    return WorkerSpec(
        job_id="j1",
        role=0,
        attempt=1,
        data_dir=str(folder),
        job_dir=str(folder),
        arch="toy",
        targets=[],
        strategy="starfish",
        parameters={},
        base_round=0,
        base_model_hash="",
        session_id="j1.1",
        peer_host="127.0.0.1",
        peer_port=0,
        peer_identity="party1",
        dealer_host="127.0.0.1",
        dealer_port=1,
        dealer_identity="dealer",
        tls_ca="ca.pem",
        tls_cert="p.pem",
        tls_key="p.key",
        precision_bits=16,
        session_timeout_s=1.0,
        step_check="off",
        task_timeout_s=1.0,
        task_poll_s=0.1,
        dp={},
        task=task,
    )


def test_each_session_module_names_the_task_it_runs() -> None:
    assert load_session_module(CLIP_SESSION_MODULE).TASK == STAGE1_CLIP
    assert JOB_SESSION_MODULE == "server.jobs.attempt"  # imported by the worker only (torch)


@pytest.mark.parametrize("name", ["json", "server.stage1_clip"])
def test_a_module_that_runs_no_session_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="session module|run_session"):
        load_session_module(name)


def test_a_clip_worker_refuses_the_spec_of_a_job(tmp_path: Path) -> None:
    standby = Standby(partial(spawn_worker, CLIP_SESSION_MODULE), tmp_path / "logs", "clip", enabled=False)
    proc, log_path = standby.take()
    spec_path = _spec(tmp_path, "unlearn").write(tmp_path / "attempt-1.json")
    worker = WorkerProcess.assign(proc, log_path, spec_path, lambda _msg: None)
    deadline = time.monotonic() + START_S
    while worker.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    code = worker.poll()
    worker.kill()
    assert code == EXIT_FAILED
    assert "is a 'unlearn' session; this worker runs 'stage1_clip' sessions" in log_path.read_text()
    assert "server.workers.worker" in " ".join(proc.args) and CLIP_SESSION_MODULE in proc.args
