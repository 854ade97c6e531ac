"""The re-base rule of docs/JOBS.md §2 on party0's job manager, as a component.

Why a component test: on real processes the window cannot be opened on demand. The job fixes
its base M_T only after `_await_no_open_round` (training already durably paused), and a round
record is stored before party1 is told about it (`Coordinator._open`), so no round can be open
unseen when T is fixed; the one remaining window — a coordinator step that checked the pause an
instant before it was set — is a race no fault injection reaches deterministically. Here the
chain is moved by committing a round in a real store, with a real job table, real checkpoint
directories and a recording stand-in for the peer channel.
"""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from server.jobs.jobstore import JobStore
from server.jobs.manager import JobManager
from server.store import Store

from helpers.store_rounds import commit_round

M = 4


class RecordingPeer:
    """Stands in for party0's peer channel: records every call, answers with nothing."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def unary(self, method: str, request):
        self.calls.append((method, request))
        return None


def _manager(tmp_path: Path) -> tuple[JobManager, Store, JobStore, RecordingPeer]:
    store = Store(tmp_path / "p0", 0)
    store.install_initial_model("toy", np.zeros(M, dtype=np.float32), 0.5)
    commit_round(store, 1, {"c1": 3, "c2": 4}, M)
    jobs = JobStore(tmp_path / "jobs")
    peer = RecordingPeer()
    manager = JobManager.__new__(JobManager)  # no worker standby, no thread: the rule alone
    manager.store, manager.jobs, manager.peer = store, jobs, peer
    manager.state = SimpleNamespace(
        store=store,
        stopping=threading.Event(),
        end_open_round=threading.Event(),
        training_paused=threading.Event(),
    )
    manager.cfg = SimpleNamespace(
        jobs=SimpleNamespace(poll_s=0.01, pause_training_after_s=5.0), rounds=SimpleNamespace(poll_s=0.0)
    )
    manager._cancel = threading.Event()
    return manager, store, jobs, peer


def _running_job(jobs: JobStore, store: Store, base: int):
    job = jobs.add("j1", ["c1"], "starfish", "{}")
    jobs.update(
        "j1",
        state="running",
        base_round=base,
        base_model_hash=store.global_model_hash(base),
        attempts=3,
        failures=2,
        progress_round=1,
    )
    checkpoints = jobs.job_dir(job.job_id) / "checkpoints"
    (checkpoints / "ckpt-1").mkdir(parents=True)
    (checkpoints / "ckpt-1" / "share.bin").write_bytes(b"\0" * 8)
    return jobs.get("j1"), checkpoints


def test_a_round_committed_after_the_base_rebases_the_job(tmp_path: Path):
    manager, store, jobs, peer = _manager(tmp_path)
    job, checkpoints = _running_job(jobs, store, base=1)
    manager.state.training_paused.set()
    assert not manager._chain_moved(job)
    newest = commit_round(store, 2, {"c1": 3, "c2": 4, "c3": 5}, M)  # a round that slipped past the pause
    assert manager._chain_moved(job) and manager._installed_model(job) == ""

    rebased = manager._rebase(job)

    assert (rebased.base_round, rebased.base_model_hash) == (2, newest)
    assert not checkpoints.exists()
    assert [(m, r.job_id) for m, r in peer.calls] == [("CancelJob", "j1")]
    assert not peer.calls[0][1].keep_checkpoints  # party1 drops its checkpoints
    assert (rebased.failures, rebased.progress_round, rebased.rebased) == (0, 0, 1)
    assert rebased.state == "running" and "re-based on global model 2" in rebased.step
    assert manager.state.training_paused.is_set()
    assert not manager._chain_moved(rebased)
    commit_round(store, 3, {"c1": 3, "c2": 4}, M)
    assert manager._rebase(jobs.get("j1")).rebased == 2  # every re-base is counted


def test_an_install_just_before_a_restart_is_no_moved_chain(tmp_path: Path):
    manager, store, jobs, peer = _manager(tmp_path)
    job, checkpoints = _running_job(jobs, store, base=1)
    digest = store.install_global_model(2, "toy", np.ones(M, dtype=np.float32), 0.5)  # the job's M_{T+1}

    assert manager._installed_model(job) == digest
    assert checkpoints.exists() and peer.calls == []


def test_a_committed_round_is_not_taken_for_the_jobs_install(tmp_path: Path):
    manager, store, jobs, _ = _manager(tmp_path)
    job, _ = _running_job(jobs, store, base=1)
    commit_round(store, 2, {"c1": 3, "c2": 4}, M)

    assert manager._installed_model(job) == ""
    assert manager._chain_moved(job)
