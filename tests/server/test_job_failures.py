"""Which process a failed session attempt is blamed on, and failed jobs' checkpoints
(kept, adopted by an identical request, removed when they can no longer be adopted)."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

from server.jobs.adoption import adopt_checkpoints, adoptable, has_checkpoints, stale_failed
from server.jobs.jobstore import JobStore
from server.workers.failures import (
    EXIT_DEALER,
    EXIT_ORPHANED,
    RESTARTED,
    Observed,
    blame,
    last_error_line,
    observe_exit,
    observe_party1,
)

KILL = -signal.SIGKILL


def test_a_killed_process_is_blamed_not_the_worker_that_lost_its_connection(tmp_path: Path):
    log = tmp_path / "w.log"
    log.write_text("worker INFO joining\nTraceback ...\nRuntimeError: connection closed by peer\n")
    party0 = observe_exit("party0 worker", 1, log)
    assert party0.kind == "failed" and "RuntimeError: connection closed" in party0.detail
    killed_p1 = blame([observe_exit("dealer", None), party0, observe_exit("party1 worker", KILL)])
    assert killed_p1.process == "party1 worker"
    assert killed_p1.error.startswith("party1 worker killed by SIGKILL")
    dealer = blame([observe_exit("dealer", KILL), party0, observe_exit("party1 worker", 1)])
    assert dealer.process == "dealer" and "killed by SIGKILL" in dealer.error
    own = blame([observe_exit("dealer", None), observe_exit("party0 worker", KILL), observe_exit("party1 worker", 1)])
    assert own.process == "party0 worker"


def test_a_party_that_went_away_is_blamed_before_workers_that_failed():
    orphan = observe_exit("party1 worker", EXIT_ORPHANED)
    assert orphan == Observed("party1", "gone", orphan.detail)
    gone = blame([observe_exit("party0 worker", 1), Observed("party1", "gone", "is unreachable")])
    assert gone.process == "party1"
    assert blame([observe_exit("party0 worker", 2)]).process == "party0 worker"
    dealer = blame([observe_exit("party0 worker", EXIT_DEALER), observe_exit("party1 worker", 1)])
    assert dealer.process == "dealer" and dealer.error.startswith("dealer failed the session")
    assert blame([observe_exit("party0 worker", None)]).process == "unknown"
    assert last_error_line(Path("/nonexistent")) == ""


def _failed_job(jobs: JobStore, job_id: str, base: str, params: dict, rounds=(1, 2)) -> None:
    jobs.add(job_id, ["c1"], "starfish", json.dumps(params, sort_keys=True))
    jobs.update(job_id, base_model_hash=base)
    for t in rounds:
        (jobs.job_dir(job_id) / "checkpoints" / f"t{t:06d}").mkdir(parents=True)
    jobs.finish(job_id, "failed", error="attempts used up")


def test_identical_request_adopts_failed_checkpoints(tmp_path: Path):
    jobs = JobStore(tmp_path)
    _failed_job(jobs, "jold", "h1", {"beta": 0.25})
    _failed_job(jobs, "jother", "h1", {"beta": 0.5})
    new = jobs.add("jnew", ["c1"], "starfish", '{"beta": 0.25}')
    assert adoptable(jobs, new, "h2") is None  # another base model: not the same computation
    old = adoptable(jobs, new, "h1")
    assert old is not None and old.job_id == "jold"
    assert adopt_checkpoints(jobs, "jold", new, "h1")
    assert not has_checkpoints(jobs, "jold") and has_checkpoints(jobs, "jnew")
    assert sorted(p.name for p in (jobs.job_dir("jnew") / "checkpoints").iterdir()) == ["t000001", "t000002"]
    assert jobs.get("jnew").adopted_from == "jold"
    assert not adopt_checkpoints(jobs, "jother", new, "h1")  # other parameters: refused
    jobs.close()


def test_stale_failed_checkpoints(tmp_path: Path):
    jobs = JobStore(tmp_path)
    _failed_job(jobs, "ja", "h1", {})
    _failed_job(jobs, "jb", "h2", {})
    assert stale_failed(jobs, "h1", keep_s=3600) == ["jb"]  # base model moved on
    assert sorted(stale_failed(jobs, "h1", keep_s=3600, any_base=True)) == ["ja", "jb"]  # a client was erased
    jobs.update("ja", finished=time.time() - 7200)
    assert sorted(stale_failed(jobs, "h1", keep_s=3600)) == ["ja", "jb"]  # kept long enough
    jobs.close()


def test_job_table_of_an_older_version_gains_the_new_columns(tmp_path: Path):
    import sqlite3

    root = tmp_path / "jobs"
    root.mkdir()
    db = sqlite3.connect(root / "jobs.sqlite")
    from server.jobs.jobstore import SCHEMA

    db.executescript(SCHEMA)
    db.execute(
        "INSERT INTO jobs (job_id, seq, targets, strategy, parameters, state, created) VALUES "
        "('j1', 1, '[\"c1\"]', 'starfish', '{}', 'failed', 0)"
    )
    db.commit()
    db.close()
    jobs = JobStore(tmp_path)
    job = jobs.get("j1")
    assert job is not None and job.failures == 0 and job.failed_process == "" and job.worker_exit is None
    assert job.dequeued is None
    jobs.update("j1", dequeued=5.0)
    assert jobs.get("j1").dequeued == 5.0
    jobs.close()


def _peer_state(state: str, error: str = "", exited: bool = False, code: int = 0):
    from types import SimpleNamespace

    return SimpleNamespace(state=state, error=error, worker_exited=exited, worker_exit_code=code)


def test_party1_side_of_an_attempt():
    assert observe_party1(None) == Observed("party1", "gone", "is unreachable (process down or restarting)")
    assert observe_party1(_peer_state("running")).kind == "running"
    assert observe_party1(_peer_state("failed", RESTARTED)).process == "party1"
    killed = observe_party1(_peer_state("failed", "party1 worker killed by SIGKILL", True, KILL))
    assert killed == Observed("party1 worker", "killed", "killed by SIGKILL")
    failed = observe_party1(_peer_state("failed", "party1 worker exited with code 1: ValueError: x", True, 1))
    assert failed == Observed("party1 worker", "failed", "exited with code 1: ValueError: x")


def test_a_dealer_error_anywhere_in_a_failure_names_the_dealer():
    from mpc.plane.dealer_client import DealerError
    from server.workers.worker import _dealer_failed

    try:
        try:
            raise DealerError("dealer at 127.0.0.1:1: connection reset")
        except DealerError as inner:
            raise RuntimeError("the provider could not fetch a triple") from inner
    except RuntimeError as exc:
        assert _dealer_failed(exc)
    assert not _dealer_failed(RuntimeError("Connection closed by peer"))
