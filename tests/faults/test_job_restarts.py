"""party0 restarted (SIGKILL) during an unlearning job while training goes on (real party,
worker and dealer processes on loopback; real SDK clients).

One trained service for the module: after the Stage I rounds training continues (`max_rounds = 0`)
and every client that is not a target keeps taking part in round after round while the jobs run,
so a round with uploads is open or closing whenever a job is filed. Each target took part in
Stage I only, then left. For trial k of n (seed 4000 + k) party0 is killed 8·(k + u)/n s after
the job is filed (u seeded uniform in [0, 1): the trials spread over 0–8 s) — while the job
waits for the open round, while its sessions run, or while it installs and erases — and
restarted 0.5–3 s later. Then:

* the job succeeds within the 2PC ≡ plaintext bound of the undisturbed run over the history it
  unlearned from (its M_T may be newer than the one it was filed at: a job whose chain moved
  runs again from the current chain, docs/JOBS.md §2);
* its target holds no share on either party and the job's model is the global model T+1;
* the chain is whole: every committed round i opened from M_{i−1}, and training goes on from
  the job's model (a round commits from it), without the target;
* every acknowledged upload is counted in its committed round on both parties, unless the job
  ended that round below the minimum cohort (abandoned: its uploads are kept, not aggregated).

`STARFISH_FAULT_TRIALS` sets the number of trials (2 by default).
"""

from __future__ import annotations

import json
import os
import random
import threading
import time

import pytest

from client_sdk import StarfishError
from proto.starfish.v1 import admin_pb2

from helpers.stage2_fixtures import TASK_TIMEOUT_S, TrainedService, plaintext_reference, relative_gap

TRIALS = int(os.environ.get("STARFISH_FAULT_TRIALS", "2"))
TARGETS = [f"t{k}" for k in range(TRIALS)]
TRAINERS = [f"c{i}" for i in range(5)]
ROUNDS = 4
PARAMS = {"beta": 0.25, "anchor_noise": False}  #: compared with an undisturbed run draw for draw (no secret noise)
JOB_TIMEOUT_S = 300
MAX_OFFSET_S = 8.0  #: party0 is killed up to this long after the job is filed
GAP = 1e-3  #: the 2PC ≡ plaintext bound (fixed-point noise alone reaches ~1e-4 on this model)
pytestmark = pytest.mark.timeout(600 + 300 * TRIALS)


class Trainers:
    """Non-target clients taking part in every round until stopped; receipts by (round, client)."""

    def __init__(self, service: TrainedService):
        self.service = service
        self.stop = threading.Event()
        self.receipts: dict[tuple[int, str], object] = {}
        self._threads = [threading.Thread(target=self._run, args=(c,), daemon=True) for c in TRAINERS]

    def _run(self, cid: str) -> None:
        problem = self.service.problem
        with self.service.dep.client(cid) as sdk:
            last = self.service.rounds
            while not self.stop.is_set():
                try:
                    receipt = sdk.run_round(lambda p: (problem.gradient(cid, p), problem.n(cid)), last, 5.0)
                except StarfishError:  # party0 restarting, no round open yet, a round ended: try again
                    self.stop.wait(0.2)
                    continue
                self.receipts[(receipt.round, cid)] = receipt
                last = receipt.round

    def __enter__(self) -> Trainers:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for t in self._threads:
            t.join(30)


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    svc = TrainedService.create(
        tmp_path_factory.mktemp("jobrestarts"),
        TRAINERS + TARGETS,
        rounds=ROUNDS,
        round_cfg={"max_rounds": 0, "deadline_s": 8.0},  # training goes on while jobs run
        jobs={"task_timeout_s": TASK_TIMEOUT_S, "max_attempts": 3, "pause_training_after_s": 2.0},
        unlearning={"parameters": PARAMS},
    )
    with Trainers(svc) as trainers:
        svc.trainers = trainers  # type: ignore[attr-defined]
        yield svc
    svc.stop()


def _admin_call(service, call):
    end = time.time() + 60
    while True:
        try:
            with service.dep.admin() as admin:
                return call(admin)
        except StarfishError:  # party0 restarting
            if time.time() > end:
                raise
            time.sleep(0.1)


def _await_open_round_with_uploads(service) -> int:
    end = time.time() + 60
    while time.time() < end:
        store = service.store(0)
        try:
            rec = store.current_round()
            if rec is not None and rec.state == "open" and store.uploads(rec.round):
                return rec.round
        finally:
            store.close()
        time.sleep(0.05)
    raise AssertionError("training did not go on: no open round with uploads")


def _await_end(service, job_id: str) -> admin_pb2.JobStatus:
    end = time.time() + JOB_TIMEOUT_S
    while time.time() < end:
        try:
            with service.dep.admin() as admin:
                status = admin.job_status(job_id)
        except StarfishError:  # party0 restarting
            time.sleep(0.1)
            continue
        if status.state not in (admin_pb2.JOB_STATE_QUEUED, admin_pb2.JOB_STATE_RUNNING):
            return status
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} did not end within {JOB_TIMEOUT_S} s")


def _check_chain(service, job_model: str, base: int, target: str) -> None:
    """Every committed round opened from the previous global model; a round committed from the
    job's model M_{T+1}; the target is a member of no round after T; it holds no share."""
    end = time.time() + 60
    while _admin_call(service, lambda a: a.status()).latest_committed < base + 2 and time.time() < end:
        time.sleep(0.2)  # training goes on from the job's model
    for role in (0, 1):
        store = service.store(role)
        try:
            assert store.global_model_hash(base + 1) == job_model, f"party{role}: M_{base + 1} is not the job's model"
            committed = store.committed_rounds()
            assert base + 2 in committed, f"party{role}: no round committed from the job's model"
            for r in committed:
                assert store.round_record(r).model_in_hash == store.global_model_hash(r - 1), f"round {r} off the chain"
                assert r <= base or target not in store.round_members(r), f"{target} counted in round {r}"
            assert store.shares_held(target) == 0, f"party{role} still holds shares of {target}"
        finally:
            store.close()


def _check_acked(service, receipts: dict) -> None:
    """Every acknowledged upload is held by both parties and counted in its committed round, or
    its round was abandoned (ended below the minimum cohort by a job: kept, not aggregated)."""
    stores = [service.store(role) for role in (0, 1)]
    try:
        for (r, client), receipt in sorted(receipts.items()):
            rec = stores[0].round_record(r)
            if rec is None or rec.state not in ("committed", "abandoned"):
                continue  # the round still open when the trainers stopped
            for p, store in enumerate(stores):
                held = store.upload(r, client)
                assert held is not None and held.grad_sha256 == receipt.content_sha256[p], (
                    f"party{p} lost the acknowledged upload of {client} in round {r}"
                )
                if rec.state == "committed":
                    assert client in store.round_members(r), f"upload of {client} not counted in round {r}"
    finally:
        for s in stores:
            s.close()


@pytest.mark.parametrize("trial", range(TRIALS))
def test_party0_restart_during_a_job_while_training_goes_on(service, trial):
    rng = random.Random(4000 + trial)
    offset = MAX_OFFSET_S * (trial + rng.random()) / TRIALS  #: the trials spread over 0–8 s
    target, outage = TARGETS[trial], rng.uniform(0.5, 3.0)
    open_round = _await_open_round_with_uploads(service)
    job_id = _admin_call(service, lambda a: a.unlearn([target], parameters=PARAMS))
    time.sleep(offset)
    service.dep.kill(0)
    time.sleep(outage)
    service.dep.start(0)
    final = _await_end(service, job_id)
    assert final.state == admin_pb2.JOB_STATE_SUCCEEDED, (offset, final.error, final.last_error)
    report = json.loads(_admin_call(service, lambda a: a.job_report(job_id)).report_json)
    base = report["job"]["base_round"]
    assert base >= open_round - 1, (base, open_round)
    _, model = _admin_call(service, lambda a: a.job_model(job_id))
    reference, ref_report = plaintext_reference(service, report, frozenset(service.erased))
    service.erased.append(target)
    gap = relative_gap(model, reference.numpy())
    rebased = report["job"]["rebased"]
    print(f"trial {trial}: killed {offset:.1f} s into job {job_id}, base M_{base}, re-based {rebased}, gap {gap:.2e}")
    assert report["selection"] == ref_report["selection"] and report["flags"] == ref_report["flags"]
    assert gap <= GAP, (offset, gap)
    _check_chain(service, report["job"]["model_hash"], base, target)
    _check_acked(service, dict(service.trainers.receipts))
