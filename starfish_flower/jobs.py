"""`TaskRelay`: runs the Flower clients an unlearning job asks for.

A Starfish job (Stage II) asks remaining clients for exact updates at unlearned models
(warm-up and correction tasks) and waits for their shares until a deadline. Flower
ClientApps run only when the server sends them a message, so while a job runs the
strategy polls party0 for the job's open tasks (`AdminClient.list_tasks`: task id,
client, deadline — no model, no share) and sends each asked client's node one TRAIN
message naming its tasks; `StarfishMod` answers them with the app's train function.

Once the job SUCCEEDED, party0 runs its federated evaluation (docs/JOBS.md §7): one task of
kind TASK_KIND_EVALUATE per remaining client. The relay sends each asked client's node one
EVALUATE message naming its task (the mod answers with the app's evaluate function at M̂
and M_T, as secret-shared counts) and waits until party0's JobStatus shows the evaluation
published (`federated_evaluation.state` leaves pending/running) or the tasks expired plus
`reveal_s` for the check and reveal; `log_evaluation` puts the published result in Flower's
output.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Mapping

from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, RecordDict
from flwr.serverapp import Grid

from client_sdk.admin import AdminClient
from proto.starfish.v1 import admin_pb2, client_pb2
from starfish_flower import keys, logs

log = logs.get(__name__)
ENDED = (admin_pb2.JOB_STATE_SUCCEEDED, admin_pb2.JOB_STATE_FAILED, admin_pb2.JOB_STATE_CANCELLED)
ACTIVE = (admin_pb2.JOB_STATE_QUEUED, admin_pb2.JOB_STATE_RUNNING)
EVALUATING = ("pending", "running")  #: federated evaluation states still under way (docs/JOBS.md §7)
EVALUATE_TASK = client_pb2.TASK_KIND_EVALUATE


class TaskRelay:
    def __init__(self, admin: AdminClient, record_keys: tuple[str, str], poll_s: float = 0.2, reveal_s: float = 30.0):
        self.admin = admin
        self.arrays_key, self.config_key = record_keys
        self.poll_s = poll_s
        self.reveal_s = reveal_s  #: how long after the evaluation tasks' deadline party0 may take to publish
        self.answered = 0  #: warm-up/correction/recovery tasks the clients reported answered
        self.evaluated = 0  #: evaluation tasks the clients reported answered

    def active_jobs(self) -> list[str]:
        return [j.job_id for j in self.admin.list_jobs().jobs if j.state in ACTIVE]

    def follow(
        self,
        grid: Grid,
        job_id: str,
        nodes: Mapping[str, int],
        template: ArrayRecord,
        config: ConfigRecord,
        timeout_s: float,
    ) -> admin_pb2.JobStatus:
        """Relay the job's tasks to the clients' nodes until the job ends, then, if it
        succeeded, its evaluation tasks until the evaluation is published; its final status."""
        sent: set[str] = set()
        end = time.time() + timeout_s
        shown = ("", -1.0)
        while time.time() < end:
            status = self.admin.job_status(job_id)
            if status.state == admin_pb2.JOB_STATE_SUCCEEDED:
                return self.follow_evaluation(grid, job_id, nodes, template, config, end)
            if status.state in ENDED:
                return status
            if (status.step, round(status.progress, 1)) != shown:  # progress, each new step or tenth
                shown = (status.step, round(status.progress, 1))
                log.info(
                    "Starfish job %s: %s (%.0f %%, %.0f s)", job_id, status.step, 100 * status.progress, status.seconds
                )
            tasks = self._new_tasks(job_id, sent)
            if not tasks:
                time.sleep(self.poll_s)
                continue
            self.answered += self._relay(grid, tasks, nodes, template, config, MessageType.TRAIN, keys.ANSWERED)
        raise TimeoutError(
            f"waited {timeout_s:.0f} s for unlearning job {job_id} to end; last step: {shown[0] or 'none reported'}"
        )

    def follow_evaluation(
        self,
        grid: Grid,
        job_id: str,
        nodes: Mapping[str, int],
        template: ArrayRecord,
        config: ConfigRecord,
        end: float,
    ) -> admin_pb2.JobStatus:
        """Relay the succeeded job's evaluation tasks as EVALUATE messages until party0
        publishes the outcome, the tasks' deadline + `reveal_s` passed, or `end`; the last
        status (the job stays SUCCEEDED whatever the evaluation does)."""
        sent: set[str] = set()
        until = end
        while True:
            status = self.admin.job_status(job_id)
            if status.federated_evaluation.state not in EVALUATING or time.time() >= until:
                break
            tasks = self._new_tasks(job_id, sent, EVALUATE_TASK)
            if not tasks:
                time.sleep(self.poll_s)
                continue
            until = min(end, max(t.deadline_unix for t in tasks) + self.reveal_s)
            self.evaluated += self._relay(grid, tasks, nodes, template, config, MessageType.EVALUATE, keys.EVALUATED)
        return status

    def _new_tasks(self, job_id: str, sent: set[str], kind: int | None = None) -> list:
        """The job's open tasks (of `kind`, or any) not relayed yet; marks them relayed in `sent`."""
        tasks = [t for t in self.admin.list_tasks(job_id) if t.task_id not in sent and (kind is None or t.kind == kind)]
        sent.update(t.task_id for t in tasks)
        return tasks

    def _relay(
        self,
        grid: Grid,
        tasks: list,
        nodes: Mapping[str, int],
        template: ArrayRecord,
        config: ConfigRecord,
        kind: str,
        counter: str,
    ) -> int:
        """Send each asked client's node one message of `kind` naming its tasks; the number
        of tasks the replies report answered (their `counter` metric)."""
        by_client: dict[str, list[str]] = defaultdict(list)
        for t in tasks:
            by_client[t.client_id].append(t.task_id)
        until = max(t.deadline_unix for t in tasks)
        unknown = sorted(c for c in by_client if c not in nodes)
        if unknown:
            log.warning("Starfish job tasks for clients with no known Flower node (not relayed): %s", unknown)
        messages = []
        for client, ids in by_client.items():
            if client not in nodes:
                continue
            cfg = ConfigRecord({**dict(config), keys.TASKS: ids, keys.TASKS_UNTIL: until})
            content = RecordDict({self.arrays_key: template, self.config_key: cfg})
            messages.append(Message(content=content, message_type=kind, dst_node_id=nodes[client]))
        if not messages:
            return 0
        log.info("Starfish: relaying %d %s task(s) to %d node(s)", len(tasks), kind, len(messages))
        replies = grid.send_and_receive(messages, timeout=max(1.0, until - time.time() + 5.0))
        answered = 0
        for reply in replies:
            if reply.has_error():
                log.warning("task reply from node %d: %s", reply.metadata.src_node_id, reply.error.reason)
            else:
                answered += int(next(iter(reply.content.metric_records.values()))[counter])
        return answered


def log_evaluation(job_id: str, evaluation: admin_pb2.FederatedEvaluation) -> None:
    """One line in Flower's output with what party0 published (only sums are ever revealed)."""
    if evaluation.state == "revealed":
        log.info(
            "Starfish job %s: federated evaluation by %d clients: M̂ accuracy %.1f %%, M_T %.1f %%",
            job_id,
            evaluation.accepted,
            100 * evaluation.accuracy_new,
            100 * evaluation.accuracy_old,
        )
    elif evaluation.state in EVALUATING:
        log.warning("Starfish job %s: federated evaluation not published in time (%s)", job_id, evaluation.state)
    else:
        log.info("Starfish job %s: federated evaluation %s: %s", job_id, evaluation.state or "none", evaluation.summary)
