"""Stage II with input validation, on real processes (dealer, party0, party1, SDK clients).

A remaining client answers every task of an unlearning job with a correctly bound share
pair of 2^30 in every coordinate (made by hand, past the SDK's checks); without the check
both job workers fail on it in every session attempt and the job fails (a veto). With it, the answer is refused in
2PC and treated as missing: the job succeeds, the target is erased on both parties, and
the client is named in the job report, its summary, JobStatus and both parties' logs.
The same attack is run against a Starfish, a FedRecover and a Crab job: the two baselines
ask remaining clients for fresh gradients (FedRecover's warm-up, corrections and final
tuning; Crab's recovery rounds), so each has tasks to veto, and each must survive it.
"""

from __future__ import annotations

import json
import threading

import pytest

from proto.starfish.v1 import admin_pb2

from helpers.plumbing_schedule import PLUMBING_SCHEDULE
from helpers.poisoned_inputs import PoisoningClient
from helpers.stage2_fixtures import TrainedService

pytestmark = pytest.mark.timeout(600)
CLIENTS = [f"c{i}" for i in range(5)]
TARGET, ATTACKER = "c0", "c3"


def _serve_poisoned(svc: TrainedService, stop: threading.Event) -> tuple[PoisoningClient, threading.Thread]:
    dep = svc.dep
    client = PoisoningClient(
        ATTACKER,
        dep.creds["clients"][ATTACKER],
        dep.address(0),
        dep.address(1),
        dep.ca_cert,
        outbox_dir=dep.root / "outbox" / f"{ATTACKER}-poisoning",
    )

    def loop() -> None:
        while not stop.is_set():
            try:
                client.serve_tasks(lambda p, _t: (svc.problem.gradient(ATTACKER, p), svc.problem.n(ATTACKER)), stop)
            except Exception:  # a party restarting: keep serving
                stop.wait(0.2)

    thread = threading.Thread(target=loop, daemon=True, name="tasks-poisoning")
    thread.start()
    return client, thread


#: strategy → job parameters (every strategy asks the attacker at least once)
STRATEGIES = {
    "starfish": PLUMBING_SCHEDULE,
    "fedrecover": {"warmup_rounds": 1, "correction_interval": 2, "final_tuning": 1},
    "crab": {"client_ratio": 1.0, "sensitivity_ratio": 0.0},
}


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_a_poisoned_task_answer_is_refused_named_and_the_job_succeeds(tmp_path, strategy):
    svc = TrainedService.create(
        tmp_path / "svc",
        CLIENTS,
        rounds=4,
        jobs={"task_timeout_s": 15.0},
        unlearning={"parameters": {"beta": 0.25}},
        validation={"enabled": True},
    )
    stop = threading.Event()
    try:
        svc.unserve(ATTACKER)
        attacker, thread = _serve_poisoned(svc, stop)
        with svc.dep.admin() as admin:
            job_id = admin.unlearn([TARGET], strategy, STRATEGIES[strategy])
            done = admin.wait_job(job_id, 420)
            assert done.state == admin_pb2.JOB_STATE_SUCCEEDED, (done.error, done.failed_process)
            assert attacker.poisoned, "the attacker answered no task"
            assert {e.client_id for e in done.refused_answers} == {ATTACKER}
            assert "upload check" in done.refused_answers[0].reason
            reply = admin.job_report(job_id)
        report = json.loads(reply.report_json)
        assert {e["client"] for e in report["refused_answers"]} == {ATTACKER}
        assert len(report["refused_answers"]) == len(attacker.poisoned)
        assert f"answer of {ATTACKER} refused" in reply.summary
        assert sorted(report["erasure"]) == [TARGET] and report["job"]["strategy"] == strategy
        for role in (0, 1):
            store = svc.store(role)
            try:
                assert store.shares_held(TARGET) == 0 and store.is_erased(TARGET)
            finally:
                store.close()
            log = (svc.dep.root / "logs" / f"party{role}.log").read_text()
            assert f"answer of {ATTACKER} refused" in log or f"{ATTACKER} refused" in log, role
    finally:
        stop.set()
        svc.stop()
