"""The federated evaluation of a job's result on real processes (docs/JOBS.md §7): after the
job succeeded, the remaining SDK clients score M̂ and M_T on their own data with a registered
callback and answer with secret-shared counts; the parties check each answer in 2PC, add the
accepted ones and reveal only the sums under the cohort rule.

One trained service, three jobs:
1. forget c0 — c1..c4 answer honestly (each its own counts, including a probe: the examples
   of label 1), c5 answers garbage (a count above its total, then a 2^40 share): c5 is refused
   and named, the sums are exactly the plain sums of c1..c4's counts and appear in the report,
   in JobStatus and in the rendered page; the job stays SUCCEEDED;
2. forget c1 — only c2 and c3 answer (k = 3): nothing is revealed, the report says
   "not enough evaluators" with the count, and the silent clients are counted as missing;
3. forget c2 with no evaluation callback registered, SIGKILL party0 while the evaluation
   waits: after the restart it is `not_done`, the job SUCCEEDED, and the next job runs.
"""

from __future__ import annotations

import json
import os
import threading
from html import escape

import numpy as np
import pytest

from client_sdk.errors import StarfishError
from client_sdk.evaluation import EvalCounts
from harness.report_page import render_page
from mpc.eval_counts import encode, share
from proto.starfish.v1 import admin_pb2
from starfish_cli.admin_view import job_text

from helpers.plumbing_schedule import PLUMBING_SCHEDULE
from helpers.polling import poll
from helpers.stage2_fixtures import STAGE2_PARAMS, TASK_TIMEOUT_S, TrainedService

CLIENTS = [f"c{i}" for i in range(6)]
DEADLINE_S = 10.0
MAX_EVAL = 1000
PROBE = "label:1"


def _counts(problem, client: str, new: np.ndarray, old: np.ndarray) -> EvalCounts:
    """Client-side scoring on its own data: accuracy, and the probe (examples labelled 1)."""
    x, y = problem.data[client]
    right = [int(np.sum(((x @ np.asarray(p, np.float64)) > 0) == (y > 0.5))) for p in (new, old)]
    probe = y > 0.5
    hits = [int(np.sum((x[probe] @ np.asarray(p, np.float64)) > 0)) for p in (new, old)]
    return EvalCounts(right[0], right[1], int(len(y)), hits[0], hits[1], int(probe.sum()))


class Evaluators:
    """The clients' evaluation callbacks; what each honest one answered, per job."""

    def __init__(self, svc: TrainedService) -> None:
        self.svc = svc
        self.answered: dict[tuple[str, str], EvalCounts] = {}
        self.forged: list[str] = []

    def serve(self, cid: str, garbage: bool = False) -> None:
        """Replace the fixture's task loop of `cid` by one that also answers evaluations."""
        if cid in self.svc.serving:
            self.svc.unserve(cid)
        stop = threading.Event()

        def grad_fn(params, task):
            return self.svc.problem.gradient(cid, params), self.svc.problem.n(cid)

        def loop() -> None:
            with self.svc.dep.client(cid) as cl:
                eval_fn = self._forger(cl, cid) if garbage else self._honest(cid)
                while not stop.is_set():
                    try:
                        cl.serve_tasks(grad_fn, stop=stop, eval_fn=eval_fn)
                    except StarfishError:  # a party restarting; keep serving
                        stop.wait(0.2)

        thread = threading.Thread(target=loop, daemon=True, name=f"eval-{cid}")
        thread.start()
        self.svc.serving[cid] = (stop, thread)

    def _honest(self, cid: str):
        def eval_fn(new, old, task) -> EvalCounts:
            counts = _counts(self.svc.problem, cid, new, old)
            self.answered[(task.job_id, cid)] = counts
            return counts

        return eval_fn

    def _forger(self, cl, cid: str):
        """Garbage: correct(M̂) above total with the true gaps' bits, then a 2^40 share."""

        def eval_fn(new, old, task) -> EvalCounts:
            honest = _counts(self.svc.problem, cid, new, old)
            words = encode(np.array([honest.total, 0, honest.total, 0, 0, 0]), task.max_eval_samples)
            words[0] = honest.total + 1  # count > total, every bit still 0 or 1
            halves = share(words, os.urandom)
            halves[1][1] += 1 << 40  # and correct(M_T) pushed by a 2^40 share
            cl.submit_evaluation(task, halves)
            self.forged.append(task.job_id)
            return EvalCounts(1, 0, 0)  # malformed: the SDK itself sends nothing for it

        return eval_fn


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    svc = TrainedService.create(
        tmp_path_factory.mktemp("fedeval"),
        CLIENTS,
        rounds=6,
        jobs={"task_timeout_s": TASK_TIMEOUT_S},
        unlearning={"parameters": STAGE2_PARAMS},
        evaluation={"deadline_s": DEADLINE_S, "max_eval_samples": MAX_EVAL, "probe": PROBE},
    )
    evaluators = Evaluators(svc)
    yield svc, evaluators
    svc.stop()


def _run_job(svc: TrainedService, target: str):
    """File the job, wait for SUCCEEDED, then for the evaluation to end; (job id, final status)."""
    with svc.dep.admin() as admin:
        job_id = admin.unlearn([target], parameters=PLUMBING_SCHEDULE)
        done = admin.wait_job(job_id, 180)
        assert done.state == admin_pb2.JOB_STATE_SUCCEEDED, done.error

        def ended() -> admin_pb2.JobStatus | None:
            status = admin.job_status(job_id)
            return None if status.federated_evaluation.state in ("pending", "running") else status

        status = poll(ended, DEADLINE_S + 60, 0.3)
        assert status is not None, admin.job_status(job_id).federated_evaluation
        report = json.loads(admin.job_report(job_id).report_json)
    return job_id, status, report


@pytest.mark.timeout(400)
def test_sums_of_accepted_answers_are_revealed_and_garbage_is_named(evaluated):
    svc, evaluators = evaluated
    for cid in ("c1", "c2", "c3", "c4"):
        evaluators.serve(cid)
    evaluators.serve("c5", garbage=True)
    job_id, status, report = _run_job(svc, "c0")
    ev = report["federated_evaluation"]
    assert ev["state"] == "revealed", ev
    assert evaluators.forged == [job_id]
    assert ev["evaluators"]["asked"] == ["c1", "c2", "c3", "c4", "c5"]
    assert ev["evaluators"]["accepted"] == ["c1", "c2", "c3", "c4"]
    assert [r["client"] for r in ev["evaluators"]["refused"]] == ["c5"]
    assert "correct(M̂) ≤ total" in ev["evaluators"]["refused"][0]["reason"]
    assert ev["evaluators"]["missing"] == []
    plain = [evaluators.answered[(job_id, c)] for c in ("c1", "c2", "c3", "c4")]
    expected = {
        "correct_new": sum(c.correct_new for c in plain),
        "correct_old": sum(c.correct_old for c in plain),
        "total": sum(c.total for c in plain),
        "probe_new": sum(c.probe_new for c in plain),
        "probe_old": sum(c.probe_old for c in plain),
        "probe_total": sum(c.probe_total for c in plain),
    }
    assert ev["sums"] == expected
    assert ev["accuracy_new"] == pytest.approx(expected["correct_new"] / expected["total"])
    assert ev["accuracy_old"] == pytest.approx(expected["correct_old"] / expected["total"])
    assert ev["probe_rate_new"] == pytest.approx(expected["probe_new"] / expected["probe_total"])
    assert ev["cohort"]["met"] is True
    assert report["revealed"]["evaluation_sums"]["cohort"] == 4  # every published value in the report
    assert status.state == admin_pb2.JOB_STATE_SUCCEEDED
    fe = status.federated_evaluation
    assert fe.state == "revealed" and (fe.accepted, fe.refused, fe.missing) == (4, 1, 0)
    assert fe.accuracy_new == pytest.approx(ev["accuracy_new"])
    assert [r.client_id for r in fe.refused_clients] == ["c5"]
    sentence = f"On 4 remaining clients' own data ({expected['total']} examples) the new model scores"
    assert fe.summary.startswith(sentence)
    assert f"federated evaluation (revealed): {sentence}" in job_text(status)  # `starfish admin status`
    page = render_page(report)
    assert escape(sentence) in page
    assert f"{100 * ev['accuracy_new']:.1f} %" in page and "c5" in page
    with svc.dep.admin() as admin:
        assert "federated evaluation (revealed)" in admin.job_report(job_id).summary


@pytest.mark.timeout(400)
def test_too_few_evaluators_reveal_nothing(evaluated):
    svc, evaluators = evaluated
    for cid in ("c4", "c5"):
        if cid in svc.serving:
            svc.unserve(cid)
    for cid in ("c2", "c3"):
        evaluators.serve(cid)
    job_id, status, report = _run_job(svc, "c1")
    ev = report["federated_evaluation"]
    assert ev["state"] == "not_enough_evaluators", ev
    assert "sums" not in ev and "accuracy_new" not in ev
    assert "evaluation_sums" not in report["revealed"]
    assert ev["evaluators"]["accepted"] == ["c2", "c3"]
    assert ev["evaluators"]["missing"] == ["c4", "c5"]
    assert "not enough evaluators: 2 accepted" in ev["summary"].lower()
    assert status.state == admin_pb2.JOB_STATE_SUCCEEDED
    assert status.federated_evaluation.state == "not_enough_evaluators"
    assert status.federated_evaluation.accuracy_new == 0.0
    assert "Not enough evaluators" in render_page(report)


@pytest.mark.timeout(400)
def test_a_restart_during_the_evaluation_leaves_it_not_done_and_jobs_go_on(evaluated):
    """party0 killed while the evaluation waits for answers (the clients answer the job's
    tasks but register no evaluation callback): after its restart the evaluation is recorded
    as not done, the job stays SUCCEEDED, and the next job runs."""
    svc, _ = evaluated
    for cid in ("c2", "c3", "c4", "c5"):
        if cid in svc.serving:
            svc.unserve(cid)
        svc.serve(cid)  # the fixture's loop: job tasks only
    with svc.dep.admin() as admin:
        job_id = admin.unlearn(["c2"], parameters=PLUMBING_SCHEDULE)
        assert admin.wait_job(job_id, 180).state == admin_pb2.JOB_STATE_SUCCEEDED
        status = admin.job_status(job_id)
        assert status.federated_evaluation.state in ("pending", "running"), status.federated_evaluation
    svc.dep.kill(0)
    svc.dep.start(0)
    with svc.dep.admin() as admin:
        status = admin.job_status(job_id)
        assert status.state == admin_pb2.JOB_STATE_SUCCEEDED
        assert status.federated_evaluation.state == "not_done", status.federated_evaluation
        assert "restarted" in status.federated_evaluation.summary
        next_job = admin.unlearn(["c3"], parameters=PLUMBING_SCHEDULE)
        assert admin.wait_job(next_job, 180).state == admin_pb2.JOB_STATE_SUCCEEDED
