"""`StarfishMod` answering a job's federated evaluation (docs/FLOWER.md, "Federated
evaluation") against party0 and party1 as real processes: the Flower EVALUATE messages the
strategy relays, handed to the mod as a node receives them, with the app's own evaluate
function behind it.

After a job forgetting c0, c1..c3's apps reply with Flower's "accuracy" and "num-examples":
each is run once at M̂ and once at M_T (the parties' models, in that order), the mod sends
the counts as shares and replies with the number answered and none of the app's metrics;
the parties reveal Σ round(accuracy·n) over them. c4's app replies without "accuracy": its
mod refuses at once (not at the task's deadline) with an error naming the metric, sends
nothing, and c4 is counted missing.
"""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MessageType, Metadata, MetricRecord, RecordDict

from proto.starfish.v1 import admin_pb2, client_pb2
from starfish_flower import Parties, StarfishMod, keys
from starfish_flower.parties import identity_from_credentials

from helpers.plumbing_schedule import PLUMBING_SCHEDULE
from helpers.polling import poll
from helpers.stage2_fixtures import STAGE2_PARAMS, TASK_TIMEOUT_S, TrainedService

pytestmark = pytest.mark.timeout(400)
CLIENTS = [f"c{i}" for i in range(5)]
HONEST = ["c1", "c2", "c3"]
DEADLINE_S = 30.0  # the tasks stay listed (and answerable) this long: slack for a loaded host


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    svc = TrainedService.create(
        tmp_path_factory.mktemp("flower-eval"),
        CLIENTS,
        rounds=4,
        jobs={"task_timeout_s": TASK_TIMEOUT_S},
        unlearning={"parameters": STAGE2_PARAMS},
        evaluation={"deadline_s": DEADLINE_S, "max_eval_samples": 1000},
    )
    yield svc
    svc.stop()


def _evaluate_message(node: int, task_ids: list[str], until: float) -> tuple[Message, Context]:
    """The EVALUATE message the strategy relays to a node naming its tasks (any template model)."""
    config = ConfigRecord({keys.TASKS: task_ids, keys.TASKS_UNTIL: until})
    content = RecordDict({"arrays": ArrayRecord({"w": Array(np.zeros(6, np.float32))}), "config": config})
    metadata = Metadata(1, f"e{node}", 0, node + 1, "", "", time.time(), 3600.0, MessageType.EVALUATE)
    context = Context(run_id=1, node_id=node + 1, node_config={"partition-id": node}, state=RecordDict(), run_config={})
    return Message(content=content, metadata=metadata), context


def _app(svc: TrainedService, seen: list[np.ndarray], with_accuracy: bool = True):
    """The app's evaluate function on its node's own data (the fixture's logistic regression)."""

    def evaluate(msg: Message, context: Context) -> Message:
        w = msg.content["arrays"]["w"].numpy().astype(np.float64)
        seen.append(w)
        x, y = svc.problem.data[f"c{context.node_config['partition-id']}"]
        metrics = {"num-examples": len(y), "loss": 0.5}
        if with_accuracy:
            metrics["accuracy"] = float(np.mean(((x @ w) > 0) == (y > 0.5)))
        return Message(RecordDict({"metrics": MetricRecord(metrics)}), reply_to=msg)

    return evaluate


def _evaluation_tasks(admin, job_id: str) -> dict[str, admin_pb2.TaskEntry]:
    tasks = [t for t in admin.list_tasks(job_id) if t.kind == client_pb2.TASK_KIND_EVALUATE]
    return {t.client_id: t for t in tasks}


def test_the_mod_answers_with_the_apps_evaluate_function_and_refuses_a_reply_without_accuracy(
    service, tmp_path, monkeypatch
):
    monkeypatch.setenv("STARFISH_OUTBOX", str(tmp_path / "outbox"))
    svc = service
    mod = StarfishMod(
        Parties(svc.dep.address(0), svc.dep.address(1), svc.dep.ca_cert),
        identity_from_credentials(svc.dep.cred_path, "c{partition-id}"),
    )
    with svc.dep.admin() as admin:
        job_id = admin.unlearn(["c0"], parameters=PLUMBING_SCHEDULE)
        assert admin.wait_job(job_id, 180).state == admin_pb2.JOB_STATE_SUCCEEDED
        tasks = poll(lambda: (t := _evaluation_tasks(admin, job_id)) and len(t) == 4 and t, 30, 0.1)
        assert tasks, "party0 posted no evaluation task for the four remaining clients"
        seen: dict[str, list[np.ndarray]] = {}
        for cid in HONEST + ["c4"]:
            msg, context = _evaluate_message(int(cid[1:]), [tasks[cid].task_id], tasks[cid].deadline_unix)
            seen[cid] = []
            started = time.time()
            reply = mod(msg, context, _app(svc, seen[cid], with_accuracy=cid != "c4"))
            if cid == "c4":
                assert reply.has_error() and "lacks the metric 'accuracy'" in reply.error.reason
                assert time.time() - started < DEADLINE_S / 2  # refused at once, not at the deadline
                continue
            assert not reply.has_error(), reply.error.reason
            assert dict(reply.content["metrics"]) == {keys.EVALUATED: 1}  # none of the app's metrics
            assert reply.content[keys.REPLY][keys.CLIENT_ID] == cid

        def ended() -> admin_pb2.JobStatus | None:
            status = admin.job_status(job_id)
            return None if status.federated_evaluation.state in ("pending", "running") else status

        assert poll(ended, DEADLINE_S + 60, 0.3) is not None
        report = json.loads(admin.job_report(job_id).report_json)
    store = svc.store(0)
    unlearned = store.global_model(store.latest_committed()).params
    replaced = store.global_model(store.latest_committed() - 1).params
    for cid in HONEST:  # the app ran at M̂, then at M_T
        assert len(seen[cid]) == 2
        np.testing.assert_array_equal(seen[cid][0], unlearned.astype(np.float64))
        np.testing.assert_array_equal(seen[cid][1], replaced.astype(np.float64))
    for role in (0, 1):  # c4's mod sent nothing
        assert svc.store(role).load_task_share(tasks["c4"].task_id) is None
    ev = report["federated_evaluation"]
    assert ev["state"] == "revealed", ev
    assert ev["evaluators"]["accepted"] == HONEST and ev["evaluators"]["missing"] == ["c4"]

    def correct(params: np.ndarray, cid: str) -> int:
        x, y = svc.problem.data[cid]
        return round(float(np.mean(((x @ params.astype(np.float64)) > 0) == (y > 0.5))) * len(y))

    assert ev["sums"]["total"] == sum(svc.problem.n(c) for c in HONEST)
    assert ev["sums"]["correct_new"] == sum(correct(unlearned, c) for c in HONEST)
    assert ev["sums"]["correct_old"] == sum(correct(replaced, c) for c in HONEST)
