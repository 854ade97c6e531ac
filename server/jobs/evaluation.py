"""party0's federated evaluation of a succeeded job (docs/JOBS.md §7, "Federated evaluation").

It runs on a thread of its own after the job is durably SUCCEEDED and its certificate signed;
nothing it does changes the job, and its failure is recorded in the report as
"evaluation failed: reason". Steps:

1. post one evaluation task per remaining client (not a target) on both parties (peer
   PostEvaluation; party1 checks its own `[evaluation]` settings and model M̂), deadline
   now + `[evaluation] deadline_s`;
2. wait until both parties hold every answer or the deadline passed; a client whose answer
   is not held by both is `missing`;
3. check the answers both hold in one batch (mpc.eval_counts over a dealer session and the
   peer EvaluationStep calls: 0 starts the batch on party1, 1–2 are the check's steps);
   a malformed answer is `refused` and named, the others are accepted;
4. if the accepted evaluators meet the cohort rule (both parties check their own), open the
   sums of their counts (step 3); otherwise "not enough evaluators", nothing revealed;
5. write the report's `federated_evaluation` section (server.jobs.evaluation_section).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from mpc.eval_counts import CountVerdict, check_answers, reveal_sums, share_of_sums
from proto.starfish.v1 import peer_pb2
from server.config import PartyConfig
from server.jobs import evaluation_section, evaluation_tasks
from server.jobs.evaluation_tasks import FAILED, RUNNING, TOO_FEW
from server.jobs.jobstore import JobRecord
from server.party_state import PartyState
from server.peer_client import PeerClient, PeerRefused, Stopped
from server.upload_check import DealerCorrelation, open_link

log = logging.getLogger(__name__)
POLL_S = 0.5


def why_off(cfg: PartyConfig) -> str:
    """Why no evaluation runs ("" when it does)."""
    if not cfg.evaluation.enabled:
        return "[evaluation] enabled = false"
    if not cfg.jobs.dealer:
        return "no dealer is configured ([jobs] dealer), and the count check needs one"
    return ""


class Evaluation:
    """One job's evaluation on party0 (module docstring)."""

    def __init__(
        self,
        state: PartyState,
        peer: PeerClient,
        job: JobRecord,
        remaining: list[str],
        job_dir: Path,
        render: Callable[[dict], str],
    ):
        self.state, self.cfg, self.peer, self.job = state, state.config, peer, job
        self.job_dir, self.render = job_dir, render
        self.deadline = time.time() + self.cfg.evaluation.deadline_s
        self.tasks = {c: evaluation_tasks.task_id(job.job_id, c, self.deadline) for c in sorted(remaining)}
        self.section: dict[str, Any] = {
            "deadline_s": self.cfg.evaluation.deadline_s,
            "max_eval_samples": self.cfg.evaluation.max_eval_samples,
            "probe": self.cfg.evaluation.probe or None,
            "evaluators": {"asked": sorted(remaining), "accepted": [], "refused": [], "missing": []},
        }

    def _save(self, **values: Any) -> None:
        self.section.update(values)
        evaluation_section.write(self.job_dir, self.section, self.render)

    def run(self) -> None:
        """Steps 1–5; any failure is recorded as `failed` with its reason (a stop of party0
        leaves the section `running`: its next start records it as `not_done`)."""
        try:
            self._run()
        except Stopped:  # party0 is stopping: left running, recorded as not done at its next start
            log.info("job %s: federated evaluation interrupted: party0 is stopping", self.job.job_id)
        except Exception as exc:  # never fails the job: the report says why
            log.warning("job %s: federated evaluation failed: %s", self.job.job_id, exc)
            self._save(state=FAILED, summary=f"evaluation failed: {exc}", finished=time.time())

    def _run(self) -> None:
        self._post()
        self._save(state=RUNNING, summary="The remaining clients are evaluating the new model.")
        answered = self._await_answers()
        self.section["evaluators"]["missing"] = sorted(set(self.tasks) - set(answered))
        if not answered:
            self._too_few([])
            return
        rows = evaluation_tasks.shares(self.state.store, self.tasks, answered, self.cfg)
        batch = f"eval-{self.job.job_id}.{int(time.time())}-{os.urandom(4).hex()}"
        exchange = self._exchange_for(batch, answered)
        exchange(-1, np.zeros(0, dtype=np.int64))  # starts party1's side of the batch
        link = open_link(self.cfg, batch)
        try:
            n = self.cfg.evaluation.max_eval_samples
            verdicts = check_answers(0, rows, n, DealerCorrelation(link), exchange)
        finally:
            link.close()
        if self._too_few(self._sort(answered, verdicts)):
            return
        try:
            sums = reveal_sums(share_of_sums(rows, verdicts), exchange)
        except PeerRefused as exc:  # party1's own k is larger: it keeps its share of the sums
            if "not enough evaluators" not in str(exc):
                raise
            self._save(state=TOO_FEW, summary=f"Nothing was revealed: {exc}", finished=time.time())
            return
        self.section = evaluation_section.revealed(self.section, sums, self.cfg.evaluation.probe)
        self._save(finished=time.time())
        log.info("job %s: %s", self.job.job_id, self.section["summary"])

    def _sort(self, answered: list[str], verdicts: list[CountVerdict]) -> list[str]:
        """Step 4's outcome into the section: accepted and refused (named, with the rule broken)."""
        ev = self.section["evaluators"]
        pairs = list(zip(answered, verdicts, strict=True))
        ev["accepted"] = [c for c, v in pairs if v.accepted]
        ev["refused"] = [{"client": c, "reason": v.reason()} for c, v in pairs if not v.accepted]
        for entry in ev["refused"]:
            log.warning("job %s: evaluation answer of %s refused: %s", self.job.job_id, *entry.values())
        return ev["accepted"]

    def _post(self) -> None:
        """Step 1 on both parties (party1 first: a refusal posts nothing here)."""
        model_hash, base = self.job.model_hash, self.job.base_round
        self.peer.unary(
            "PostEvaluation",
            peer_pb2.EvaluationTasks(
                job_id=self.job.job_id,
                tasks=self._entries(list(self.tasks)),
                model_hash=model_hash,
                base_round=base,
                deadline_unix=self.deadline,
                probe=self.cfg.evaluation.probe,
                max_eval_samples=self.cfg.evaluation.max_eval_samples,
            ),
        )
        evaluation_tasks.post(self.state, self.job.job_id, self.tasks, model_hash, base, self.deadline)

    def _entries(self, clients: list[str]) -> list[peer_pb2.EvaluationTask]:
        return [peer_pb2.EvaluationTask(client_id=c, task_id=self.tasks[c]) for c in clients]

    def _await_answers(self) -> list[str]:
        """Step 2: the clients whose answers both parties hold, once all or the deadline."""
        ref = peer_pb2.EvaluationRef(job_id=self.job.job_id, tasks=self._entries(list(self.tasks)))
        while True:
            mine = set(evaluation_tasks.held(self.state.store, self.tasks))
            theirs = set(self.peer.unary("EvaluationHeld", ref).client_ids)
            both = sorted(mine & theirs)
            if self.state.stopping.is_set():
                raise Stopped("party is stopping")
            if len(both) == len(self.tasks) or time.time() >= self.deadline:
                return both
            time.sleep(POLL_S)

    def _exchange_for(self, batch: str, clients: list[str]) -> Callable[[int, np.ndarray], np.ndarray]:
        """The check's `Exchange` over EvaluationStep (wire step = protocol step + 1)."""

        def exchange(step: int, mine: np.ndarray) -> np.ndarray:
            request = peer_pb2.EvaluationStepMessage(
                job_id=self.job.job_id,
                batch_id=batch,
                step=step + 1,
                tasks=self._entries(clients) if step < 0 else [],
                words=mine.tolist(),
                dealer_identity=self.cfg.jobs.dealer_identity,
            )
            return np.array(self.peer.unary("EvaluationStep", request).words, dtype=np.int64)

        return exchange

    def _too_few(self, accepted: list[str]) -> bool:
        """Step 4's rule: record "not enough evaluators" and return True when it is not met."""
        refusal = evaluation_tasks.cohort_refusal(self.cfg, accepted)
        verdict = refusal or f"met: {len(accepted)} accepted evaluator(s), minimum cohort {self.cfg.privacy.min_cohort}"
        self.section["cohort"] = {
            "min_cohort": self.cfg.privacy.min_cohort,
            "principals": evaluation_tasks.principals(self.cfg, accepted),
            "met": refusal is None,
            "verdict": verdict,
        }
        if refusal is None:
            return False
        self._save(state=TOO_FEW, summary=refusal[0].upper() + refusal[1:] + ".", finished=time.time())
        log.info("job %s: federated evaluation: %s", self.job.job_id, refusal)
        return True
