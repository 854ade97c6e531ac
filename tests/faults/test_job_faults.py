"""Faults in unlearning jobs (real party, worker and dealer processes on loopback).

One trained service for the module (`jobs.max_attempts = 2`, `jobs.pause_training_after_s = 2`,
training never stops: after the Stage I rounds a round opens that no client joins):

* a job is not held up by that round: training pauses after 2 s, and the round is abandoned
  (no upload) or closes and commits with the uploads it holds (at least the minimum cohort 3);
* the attempt budget counts failures since the last progress: three kills, each after a new
  checkpoint both parties hold, do not fail a job with two attempts; JobStatus names the
  attempt, the killed process (party1's worker, the dealer service) and its error;
* a job whose attempts fail without progress fails naming party1's worker, keeps its
  checkpoints on both parties, and the identical re-filed request resumes from them;
* seeded random kills of party0's worker, party1's worker, the dealer, party0 and party1 at a
  random checkpoint: every job completes, within the 2PC ≡ plaintext bound (relative L2 ≤ 1e-3)
  of the undisturbed run of the same job (`STARFISH_FAULT_TRIALS` trials, 2 by default; trial k uses seed 2000 + k);
* party0 restarted (SIGKILL) during a job at a seeded checkpoint and outage, with training set to
  continue: no training round is open at any moment while the job runs (the pause is durable),
  the job's model becomes the next global model and training continues from it
  (`STARFISH_FAULT_TRIALS` − 1 restarts, at least 1; seed 3000 + k);
* every client answers one job's tasks too late (refused as past their deadline): the answers
  are dropped at once, so the next job gets every answer it asks for and ends within the bound.

The undisturbed run of a job is the same computation without faults: Starfish over the
same stored history with the same answered tasks (`stage2_fixtures.plaintext_reference`).
"""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
from pathlib import Path

import pytest

from client_sdk import StarfishError
from proto.starfish.v1 import admin_pb2
from server.jobs.checkpoints import CKPT_RE

from helpers.plumbing_schedule import PLUMBING_SCHEDULE
from helpers.polling import poll
from helpers.stage2_fixtures import TASK_TIMEOUT_S, TrainedService, plaintext_reference, relative_gap

TRIALS = int(os.environ.get("STARFISH_FAULT_TRIALS", "2"))
RESTARTS = max(1, TRIALS - 1)  #: seeded party0 restarts during a job (training set to continue)
#: c0–c3 fixed tests, then the random-kill targets, the restart targets, the two jobs of the
#: late-answer test, and one client that is never a target
CLIENTS = [f"c{i}" for i in range(7 + TRIALS + RESTARTS)]
RESTART_TARGETS = CLIENTS[4 + TRIALS : 4 + TRIALS + RESTARTS]
LATE_TARGETS = CLIENTS[4 + TRIALS + RESTARTS : 6 + TRIALS + RESTARTS]
ROUNDS = 6
#: the plumbing schedule; compared draw for draw with a plaintext run (no secret noise)
PARAMS = {"beta": 0.25, "anchor_noise": False, **PLUMBING_SCHEDULE}
JOB_TIMEOUT_S = 240
GAP = 1e-3  #: the 2PC ≡ plaintext bound; fixed-point noise alone reaches ~1e-4 on this model
VICTIMS = ("party0 worker", "party1 worker", "dealer", "party0", "party1")
pytestmark = pytest.mark.timeout(900 + 240 * (TRIALS + RESTARTS))


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    svc = TrainedService.create(
        tmp_path_factory.mktemp("jobfaults"),
        CLIENTS,
        rounds=ROUNDS,
        round_cfg={"max_rounds": 0},  # training goes on: the next round opens and nobody joins it
        jobs={"task_timeout_s": TASK_TIMEOUT_S, "max_attempts": 2, "pause_training_after_s": 2.0},
        unlearning={"parameters": PARAMS},
    )
    yield svc
    svc.stop()


def _latest_checkpoint(folder: Path) -> int:
    """The newest complete checkpoint in `folder` (read only: a worker may be writing one)."""
    try:
        return max((int(m.group(1)) for p in folder.iterdir() if (m := CKPT_RE.match(p.name))), default=0)
    except FileNotFoundError:
        return 0


def _common_checkpoint(service, job_id: str) -> int:
    """The newest unlearning round both parties checkpointed (read from their job directories)."""
    return min(_latest_checkpoint(service.job_dir(role, job_id) / "checkpoints") for role in (0, 1))


def _pid(service, victim: str, job_id: str) -> int | None:
    if victim == "dealer":  # the dealer service (its own operator's process)
        return service.dep.dealer_proc.pid
    path = service.job_dir(1 if victim == "party1 worker" else 0, job_id) / "worker.pid"
    try:
        return int(path.read_text())
    except (FileNotFoundError, ValueError):
        return None


def _status(service, job_id: str) -> admin_pb2.JobStatus | None:
    try:
        with service.dep.admin() as admin:
            return admin.job_status(job_id)
    except StarfishError:  # party0 restarting
        return None


def _await(service, job_id: str, predicate, what: str, timeout_s: float = JOB_TIMEOUT_S) -> admin_pb2.JobStatus:
    """Poll the job until `predicate(status)`; fails if the job ends first."""

    def reached() -> admin_pb2.JobStatus | None:
        status = _status(service, job_id)
        if status is not None and predicate(status):
            return status
        if status is not None and status.state not in (admin_pb2.JOB_STATE_QUEUED, admin_pb2.JOB_STATE_RUNNING):
            raise AssertionError(f"job ended ({status.state}: {status.error}) while waiting for {what}")
        return None

    status = poll(reached, timeout_s, 0.05)
    if status is None:
        raise AssertionError(f"timed out waiting for {what}")
    return status


def _kill_after_checkpoint(service, job_id: str, victim: str, round_index: int, spared: set[int]) -> int:
    """SIGKILL `victim` once both parties hold checkpoint `round_index` (a process not yet killed)."""

    def killed() -> int | None:
        pid = _pid(service, victim, job_id)
        if _common_checkpoint(service, job_id) >= round_index and pid is not None and pid not in spared:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:  # that attempt just ended: wait for the next process
                spared.add(pid)
                return None
            return pid
        status = _status(service, job_id)
        if status is not None and status.state not in (admin_pb2.JOB_STATE_QUEUED, admin_pb2.JOB_STATE_RUNNING):
            raise AssertionError(f"the job ended ({status.error}) before {victim} was killed after round {round_index}")
        return None

    pid = poll(killed, JOB_TIMEOUT_S, 0.05)
    if pid is None:
        raise AssertionError(f"no checkpoint {round_index} for {job_id}")
    if victim == "dealer":  # its operator restarts it (systemd's Restart=on-failure)
        service.dep.dealer_proc.wait(10)
        service.dep.start_dealer()
    return pid


def _finish(service, job_id: str) -> tuple[admin_pb2.JobStatus, dict]:
    final = _await(
        service,
        job_id,
        lambda s: s.state != admin_pb2.JOB_STATE_RUNNING and s.state != admin_pb2.JOB_STATE_QUEUED,
        "the end",
    )
    assert final.state == admin_pb2.JOB_STATE_SUCCEEDED, (final.error, final.last_error)
    with service.dep.admin() as admin:
        report = json.loads(admin.job_report(job_id).report_json)
    return final, report


def _gap_to_undisturbed(service, job_id: str, report: dict) -> float:
    with service.dep.admin() as admin:
        _, model = admin.job_model(job_id)
    reference, ref_report = plaintext_reference(service, report, frozenset(service.erased))
    assert report["selection"] == ref_report["selection"] and report["flags"] == ref_report["flags"]
    gap = relative_gap(model, reference.numpy())
    print(f"job {job_id}: relative L2 gap to the undisturbed run {gap:.2e}")  # shown with pytest -s
    return gap


def test_unlearn_does_not_wait_for_a_round_no_client_joins(service):
    with service.dep.admin() as admin:
        training = admin.status()
        assert training.open_round == ROUNDS + 1  # open, and no client will join it
        job_id = admin.unlearn(["c0"], parameters=PARAMS)
    _, report = _finish(service, job_id)
    gap = _gap_to_undisturbed(service, job_id, report)
    service.erased.append("c0")
    assert gap <= GAP, gap
    with service.dep.admin() as admin:
        rounds = {r.round: r for r in admin.status().rounds}
    assert rounds[ROUNDS + 1].state == "abandoned" and "abandoned" in rounds[ROUNDS + 1].error
    assert report["job"]["base_round"] == ROUNDS  # the job unlearned from the last committed model


def test_a_waiting_job_closes_a_round_that_can_commit(service):
    """Three consistent uploads (the minimum cohort) in the open round: it commits, then the job starts."""
    uploaders = CLIENTS[-3:]
    with service.dep.admin() as admin:  # the previous job just ended: the next round opens
        open_round = poll(lambda: admin.status().open_round or None, 60)
    assert open_round, "no training round opened after the previous job"
    for uploader in uploaders:
        with service.dep.client(uploader) as client:
            receipt = client.run_round(
                lambda p, c=uploader: (service.problem.gradient(c, p), service.problem.n(c)), after=open_round - 1
            )
        assert receipt.round == open_round
    with service.dep.admin() as admin:
        job_id = admin.unlearn(["c3"], parameters=PARAMS)
    _, report = _finish(service, job_id)
    gap = _gap_to_undisturbed(service, job_id, report)
    service.erased.append("c3")
    with service.dep.admin() as admin:
        rounds = {r.round: r for r in admin.status().rounds}
    assert rounds[open_round].state == "committed"
    assert [m.client_id for m in rounds[open_round].members] == uploaders
    assert report["job"]["base_round"] == open_round  # the job unlearned from the model that round made
    assert gap <= GAP, gap


def test_attempt_budget_resets_when_a_job_makes_progress(service):
    with service.dep.admin() as admin:
        job_id = admin.unlearn(["c1"], parameters=PARAMS)
    killed: set[int] = set()
    seen: list[tuple[int, str, str]] = []
    for k, victim in enumerate(("party1 worker", "party1 worker", "dealer"), start=1):
        killed.add(_kill_after_checkpoint(service, job_id, victim, k, killed))
        status = _await(service, job_id, lambda s, k=k: s.attempt > k, f"attempt {k + 1}")
        seen.append((status.attempt, status.failed_process, status.last_error))
        assert status.failed_process == victim, seen
        assert ("failed the session" if victim == "dealer" else "killed by SIGKILL") in status.last_error, seen
    final, report = _finish(service, job_id)
    gap = _gap_to_undisturbed(service, job_id, report)
    service.erased.append("c1")
    assert final.attempt == 4 and report["job"]["session_attempts"] == 4, seen  # 3 failures, budget 2
    assert gap <= GAP


def test_failed_job_keeps_checkpoints_and_identical_request_resumes(service):
    with service.dep.admin() as admin:
        failed_id = admin.unlearn(["c2"], parameters=PARAMS)
    killed = {_kill_after_checkpoint(service, failed_id, "party1 worker", 2, set())}
    killed.add(_kill_after_checkpoint(service, failed_id, "party1 worker", 2, killed))  # no progress between
    failed = _await(service, failed_id, lambda s: s.state == admin_pb2.JOB_STATE_FAILED, "the failure", 120)
    assert failed.failed_process == "party1 worker" and "killed by SIGKILL" in failed.last_error
    assert "without progress" in failed.error and "party1 worker killed by SIGKILL" in failed.error
    kept = [_latest_checkpoint(service.job_dir(r, failed_id) / "checkpoints") for r in (0, 1)]
    assert min(kept) >= 2, kept

    with service.dep.admin() as admin:
        job_id = admin.unlearn(["c2"], parameters=PARAMS)
    final, report = _finish(service, job_id)
    gap = _gap_to_undisturbed(service, job_id, report)
    service.erased.append("c2")
    assert final.adopted_from == failed_id and final.attempt == 1
    assert report["resumed_at"] and min(report["resumed_at"]) >= 2  # not from round 0
    for role in (0, 1):  # moved into the new job, then removed with it
        assert not (service.job_dir(role, failed_id) / "checkpoints").exists()
    assert gap <= GAP


def _kill_party(service, role: int, rng: random.Random) -> None:
    service.dep.kill(role)
    time.sleep(rng.uniform(0.5, 3.0))
    service.dep.start(role)


@pytest.mark.parametrize("trial", range(TRIALS))
def test_random_kills_during_jobs_reach_the_undisturbed_model(service, trial):
    rng = random.Random(2000 + trial)
    target = CLIENTS[4 + trial]
    victim, after = rng.choice(VICTIMS), rng.randint(1, 2)
    with service.dep.admin() as admin:
        job_id = admin.unlearn([target], parameters=PARAMS)
    if victim in ("party0", "party1"):
        _await(service, job_id, lambda s: _common_checkpoint(service, job_id) >= after, f"checkpoint {after}")
        _kill_party(service, int(victim[-1]), rng)
    else:
        _kill_after_checkpoint(service, job_id, victim, after, set())
    final, report = _finish(service, job_id)
    gap = _gap_to_undisturbed(service, job_id, report)
    service.erased.append(target)
    assert report["job"]["session_attempts"] >= 2, (victim, after)
    assert gap <= GAP, (victim, after, gap)


def _no_round_while(service, job_id: str) -> tuple[admin_pb2.JobStatus, list[int]]:
    """Poll until the job ends; the training rounds seen open or closing while it was queued or running."""
    seen: list[int] = []

    def ended() -> admin_pb2.JobStatus | None:
        try:
            with service.dep.admin() as admin:
                status, training = admin.job_status(job_id), admin.status()
        except StarfishError:  # party0 restarting
            return None
        if status.state not in (admin_pb2.JOB_STATE_QUEUED, admin_pb2.JOB_STATE_RUNNING):
            return status
        if status.state == admin_pb2.JOB_STATE_RUNNING and training.open_round:
            seen.append(training.open_round)
        return None

    final = poll(ended, JOB_TIMEOUT_S, 0.05)
    if final is None:
        raise AssertionError(f"job {job_id} did not end")
    return final, seen


@pytest.mark.parametrize("trial", range(RESTARTS))
def test_party0_restart_during_a_job_opens_no_round_and_training_continues_from_its_model(service, trial):
    rng = random.Random(3000 + trial)
    target, after = RESTART_TARGETS[trial], rng.randint(1, 2)
    with service.dep.admin() as admin:
        job_id = admin.unlearn([target], parameters=PARAMS)
    _await(service, job_id, lambda s: _common_checkpoint(service, job_id) >= after, f"checkpoint {after}")
    _kill_party(service, 0, rng)
    final, opened = _no_round_while(service, job_id)
    assert final.state == admin_pb2.JOB_STATE_SUCCEEDED, (final.error, final.last_error)
    assert not opened, f"training round(s) {sorted(set(opened))} open while the job ran (after={after})"
    with service.dep.admin() as admin:
        report = json.loads(admin.job_report(job_id).report_json)
    gap = _gap_to_undisturbed(service, job_id, report)
    service.erased.append(target)
    assert gap <= GAP, (after, gap)
    base, model_hash = report["job"]["base_round"], report["job"]["model_hash"]
    with service.dep.admin() as admin:
        assert admin.global_model(base + 1)[0].model_hash == model_hash  # the job's model is M_{T+1}
        # training continues: the next round opens from the job's model
        open_round = poll(lambda: admin.status().open_round or None, 30)
    assert open_round == base + 2, open_round
    store = service.store(0)
    try:
        assert store.round_record(base + 2).model_in_hash == model_hash
        assert store.shares_held(target) == 0
    finally:
        store.close()


def _serve_late(service, cid: str, slow_jobs: set[str]) -> None:
    """Like `TrainedService.serve`, but the tasks of a job in `slow_jobs` are answered after their deadline."""
    stop = threading.Event()

    def grad_fn(params, task):
        if task.job_id in slow_jobs:
            time.sleep(max(0.0, task.deadline - time.time()) + 0.3)
        return service.problem.gradient(cid, params), service.problem.n(cid)

    def loop() -> None:
        with service.dep.client(cid) as cl:
            while not stop.is_set():
                try:
                    cl.serve_tasks(grad_fn, stop=stop)
                except Exception:  # e.g. a party restarting; keep serving
                    stop.wait(0.2)

    thread = threading.Thread(target=loop, daemon=True, name=f"late-tasks-{cid}")
    thread.start()
    service.serving[cid] = (stop, thread)


def test_late_task_answers_are_dropped_and_the_next_job_gets_every_answer(service):
    first, second = LATE_TARGETS
    slow: set[str] = set()
    for cid in list(service.serving):
        service.unserve(cid)
        _serve_late(service, cid, slow)
    try:
        with service.dep.admin() as admin:
            late_job = admin.unlearn([first], parameters=PARAMS)
            slow.add(late_job)
        _, late_report = _finish(service, late_job)
        service.erased.append(first)
        missing = sum(len(e["missing"]) for e in late_report["corrections"]["events"])
        assert missing > 0, "no task answer of the first job came late"
        with service.dep.admin() as admin:
            job_id = admin.unlearn([second], parameters=PARAMS)
        _, report = _finish(service, job_id)
        gap = _gap_to_undisturbed(service, job_id, report)
        service.erased.append(second)
    finally:
        for cid in list(service.serving):
            service.unserve(cid)
            service.serve(cid)
    events = report["corrections"]["events"]
    assert events and all(not e["missing"] for e in events), [e["missing"] for e in events]
    assert gap <= GAP, gap
