"""party1's side of a job's federated evaluation (server.jobs.evaluation leads it).

* PostEvaluation: refused unless the job is one party1 ran and succeeded, its targets are not
  asked, the task ids are the derived ones, M̂ is party1's global model T + 1 and the
  `[evaluation]` settings are party1's own; then the same tasks are posted here.
* EvaluationHeld: the clients whose answers party1 holds.
* EvaluationStep 0 fixes the batch (the clients both hold) and starts party1's check on a
  thread, which joins the batch's dealer session; steps 1–2 exchange the check's vectors
  (party1's vector of a step never depends on party0's of that step, so a reply carries it);
  step 3 the sums' shares — party1 sends its share only when the accepted evaluators meet
  its own cohort rule (`evaluation_tasks.cohort_refusal`), whatever party0 asks.
"""

from __future__ import annotations

import logging
import threading
import time

import numpy as np

from mpc.eval_counts import check_answers, share_of_sums
from proto.starfish.v1 import peer_pb2
from server.jobs import evaluation_tasks
from server.jobs.jobstore import JobStore
from server.party_state import PartyState
from server.upload_check import DealerCorrelation, open_link

log = logging.getLogger(__name__)


class EvaluationRefused(ValueError):
    """party1's configuration or records say no (FAILED_PRECONDITION)."""


class FollowerEvaluation:
    """One batch on party1: the check runs on a thread, the RPCs hand vectors in and out."""

    def __init__(self, state: PartyState, tasks: dict[str, str], batch_id: str, clients: list[str]) -> None:
        self.state, self.cfg, self.batch_id = state, state.config, batch_id
        self.rows = evaluation_tasks.shares(state.store, tasks, clients, self.cfg)
        self.clients = clients
        self.cond = threading.Condition()
        self.received: dict[int, np.ndarray] = {}
        self.sent: dict[int, np.ndarray] = {}
        self.error = ""
        self.done = False
        self.started = time.monotonic()
        threading.Thread(target=self._run, name=f"evaluation-{batch_id}", daemon=True).start()

    def _run(self) -> None:
        try:
            link = open_link(self.cfg, self.batch_id)
            try:
                n = self.cfg.evaluation.max_eval_samples
                verdicts = check_answers(1, self.rows, n, DealerCorrelation(link), self._exchange)
            finally:
                link.close()
            accepted = [c for c, v in zip(self.clients, verdicts, strict=True) if v.accepted]
            refusal = evaluation_tasks.cohort_refusal(self.cfg, accepted)
            if refusal is not None:
                raise EvaluationRefused(f"party1: {refusal}")
            self._exchange(2, share_of_sums(self.rows, verdicts))
        except Exception as exc:  # reported to party0 by its next step call
            log.warning("evaluation batch %s on party1: %s", self.batch_id, exc)
            self.error = str(exc)
        finally:
            with self.cond:
                self.done = True
                self.cond.notify_all()

    def _exchange(self, step: int, mine: np.ndarray) -> np.ndarray:
        timeout_s = self.cfg.jobs.session_timeout_s
        with self.cond:
            self.sent[step] = mine
            self.cond.notify_all()
            if step == 2:  # the reveal: party1 needs nothing back
                return np.zeros(0, dtype=np.int64)
            if not self.cond.wait_for(lambda: step in self.received, timeout_s):
                raise TimeoutError(f"party0 sent no step {step} of evaluation batch {self.batch_id}")
            return self.received[step]

    def step(self, step: int, theirs: np.ndarray) -> np.ndarray:
        """party0's vector of protocol step `step` in, party1's out (the same on a retry)."""
        with self.cond:
            self.received[step] = theirs
            self.cond.notify_all()
            self.cond.wait_for(lambda: step in self.sent or self.done, self.cfg.jobs.session_timeout_s)
            if step in self.sent:
                return self.sent[step]
        raise EvaluationRefused(self.error or f"party1 reached no step {step} of evaluation batch {self.batch_id}")

    def stale(self) -> bool:
        return time.monotonic() - self.started > 4 * self.cfg.jobs.session_timeout_s


class FollowerEvaluations:
    """party1's running evaluation batches. Which tasks belong to a job is read from party1's
    own store at every call (`evaluation_tasks.verified`), so a restart of party1 loses
    nothing but a running batch."""

    def __init__(self, state: PartyState, jobs: JobStore) -> None:
        self.state, self.jobs = state, jobs
        self.lock = threading.Lock()
        self.batches: dict[str, FollowerEvaluation] = {}

    def post(self, request: peer_pb2.EvaluationTasks) -> None:
        """PostEvaluation (module docstring); EvaluationRefused says why not."""
        cfg = self.state.config
        refusal = evaluation_tasks.settings_refusal(cfg, request.probe, request.max_eval_samples)
        job = self.jobs.get(request.job_id)
        if refusal is None and (job is None or job.state != "succeeded" or job.model_hash != request.model_hash):
            refusal = f"party1 holds no succeeded job {request.job_id} with model {request.model_hash[:12]}"
        tasks = {t.client_id: t.task_id for t in request.tasks}
        if refusal is None and job is not None and set(tasks) & set(job.targets):
            refusal = "an evaluation task asks a target of the job"
        wrong = [c for c, t in tasks.items() if t != evaluation_tasks.task_id(request.job_id, c, request.deadline_unix)]
        if refusal is None and (wrong or set(tasks) - set(cfg.clients)):
            refusal = f"evaluation tasks with unknown clients or ids not derived from the job: {sorted(wrong)}"
        if refusal is not None:
            raise EvaluationRefused(refusal)
        model, base, deadline = request.model_hash, request.base_round, request.deadline_unix
        try:
            evaluation_tasks.post(self.state, request.job_id, tasks, model, base, deadline)
        except ValueError as exc:
            raise EvaluationRefused(str(exc)) from None

    def _tasks(self, job_id: str, entries) -> dict[str, str]:
        try:
            return evaluation_tasks.verified(self.state.store, job_id, {t.client_id: t.task_id for t in entries})
        except ValueError as exc:
            raise EvaluationRefused(str(exc)) from None

    def held(self, request: peer_pb2.EvaluationRef) -> list[str]:
        """EvaluationHeld: the clients of the job's tasks whose answers party1 holds."""
        return evaluation_tasks.held(self.state.store, self._tasks(request.job_id, request.tasks))

    def step(self, request: peer_pb2.EvaluationStepMessage) -> np.ndarray:
        """EvaluationStep: wire step 0 starts the batch; step k > 0 is protocol step k − 1."""
        if request.step == 0:
            return self._start(request)
        with self.lock:
            batch = self.batches.get(request.batch_id)
        if batch is None:
            raise EvaluationRefused(f"no evaluation batch {request.batch_id!r} runs on party1")
        return batch.step(request.step - 1, np.array(request.words, dtype=np.int64))

    def _start(self, request: peer_pb2.EvaluationStepMessage) -> np.ndarray:
        cfg = self.state.config
        if request.dealer_identity != cfg.jobs.dealer_identity:
            raise EvaluationRefused(f"party0 uses dealer {request.dealer_identity!r}, party1 trusts another")
        tasks = self._tasks(request.job_id, request.tasks)
        clients = sorted(tasks)
        if not clients or set(clients) - set(evaluation_tasks.held(self.state.store, tasks)):
            raise EvaluationRefused("an evaluation batch names clients whose answers party1 does not hold")
        with self.lock:
            for old in [b for b, batch in self.batches.items() if batch.stale()]:
                del self.batches[old]
            if request.batch_id not in self.batches:
                self.batches[request.batch_id] = FollowerEvaluation(self.state, tasks, request.batch_id, clients)
        return np.zeros(0, dtype=np.int64)
