"""party1's side of jobs: it verifies and follows what party0 starts (docs/JOBS.md §2).

StartJob carries the job parameters' canonical JSON (`validation.parse_request`), the
session id and where party0 listens (tls://host:port), and the dealer identity party0 uses.
party1 checks the base model M_T is the one it holds, the request is valid against its own
store (targets known, not erased, not every client; parameters canonical and within its own
bounds; a `min_cohort` parameter, when the strategy declares one, at least party1's own
`[privacy] min_cohort`) and the dealer identity is the one its own
configuration trusts (`[jobs] dealer_identity`; it connects to its own configured dealer
address), records the job, and starts its worker for that session (a new session
replaces a previous attempt's worker).
When its worker finishes, party1 installs the unlearned model as global model T+1 and
reports its hash; when it fails, the state says so and party0 starts another attempt.
CancelJob stops the worker and drops the checkpoints (the job's final state stays).
"""

from __future__ import annotations

import logging
import threading
import time
from urllib.parse import urlsplit

from mpc.plane.rendezvous import check_session_id
from server import metrics
from server.jobs.adoption import adopt_checkpoints, remove_checkpoints, stale_failed
from server.jobs.checkpoints import CheckpointDir
from server.jobs.jobstore import JobStore
from server.jobs.runner import JobFailed, JobRunnerBase
from server.jobs.validation import RequestError, check_history, parse_canonical
from server.party_state import PartyState
from server.store import StoreError
from server.workers.failures import RESTARTED, exit_description, last_error_line
from server.workers.process import WorkerProcess

log = logging.getLogger(__name__)


class JobFollower(JobRunnerBase):
    def __init__(self, state: PartyState, jobs: JobStore):
        super().__init__(state, jobs)
        self._lock = threading.Lock()
        self._workers: dict[str, tuple[str, WorkerProcess]] = {}
        if self.cfg.jobs.standby == "always":
            self.workers.fill()
        for job in jobs.all():
            if job.state == "running":  # our worker died with the previous party process
                jobs.update(job.job_id, state="failed", error=RESTARTED)

    def start_job(self, spec) -> str:
        """Handle peer StartJob; raises `RequestError` when party1 cannot follow."""
        if self.store.global_model_hash(spec.base_round) != spec.base_model_hash:
            raise RequestError("precondition", f"party1's M_{spec.base_round} is not {spec.base_model_hash[:12]}")
        # party0's canonical copy, parsed under party1's own bounds and minimum cohort k
        # (a copy that is not canonical, or whose min_cohort is below k, is refused)
        checked = parse_canonical(
            list(spec.targets),
            spec.strategy,
            spec.parameters_json,
            self.cfg.unlearning,
            min_cohort=self.cfg.privacy.min_cohort,
        )
        if self.jobs.get(spec.job_id) is None:  # a new job: its targets checked here too
            check_history(self.store, set(self.cfg.clients), checked.targets)
        url = self._check_session(spec)
        try:
            job = self.jobs.add(
                spec.job_id, checked.targets, checked.strategy, checked.parameters_json, state="running"
            )
        except ValueError as exc:
            raise RequestError("conflict", str(exc)) from None
        if spec.adopt_from and not job.adopted_from:
            adopt_checkpoints(self.jobs, spec.adopt_from, job, spec.base_model_hash)
        for stale in stale_failed(self.jobs, spec.base_model_hash, self.cfg.jobs.keep_failed_checkpoints_s):
            remove_checkpoints(self.jobs, stale)
        with self._lock:
            current = self._workers.get(job.job_id)
            if current is not None and current[0] == spec.session_id and current[1].poll() is None:
                return "already running"
            if current is not None:
                current[1].kill()
            attempt = job.attempts + 1
            self.jobs.update(
                job.job_id,
                state="running",
                error="",
                worker_exit=None,
                attempts=attempt,
                rendezvous=spec.rendezvous,
                base_round=spec.base_round,
                base_model_hash=spec.base_model_hash,
                started=job.started or time.time(),
                finished=None,
            )
            job = self.jobs.get(job.job_id)
            worker = self.start_worker(job, attempt, spec.session_id, url.hostname, url.port)  # type: ignore[arg-type]
            self._workers[job.job_id] = (spec.session_id, worker)
            metrics.job_attempt_started()
        threading.Thread(
            target=self._await_worker, args=(job.job_id, spec.session_id, worker), name=f"job-{job.job_id}", daemon=True
        ).start()
        return f"attempt {attempt} started"

    def _check_session(self, spec):
        """Where party0 listens, the session id and the dealer must be acceptable to party1."""
        url = urlsplit(spec.rendezvous)
        if url.scheme != "tls" or not url.hostname or not url.port:
            raise RequestError("invalid", f"rendezvous must be tls://host:port, got {spec.rendezvous!r}")
        try:
            check_session_id(spec.session_id)
        except ValueError as exc:
            raise RequestError("invalid", str(exc)) from None
        jc = self.cfg.jobs
        if not jc.dealer:
            raise RequestError("precondition", "no dealer service is configured on party1 ([jobs] dealer)")
        if spec.dealer_identity != jc.dealer_identity:
            raise RequestError(
                "precondition",
                f"party0 uses dealer {spec.dealer_identity!r}, "
                f"party1 trusts {jc.dealer_identity!r} ([jobs] dealer_identity)",
            )
        return url

    def _await_worker(self, job_id: str, session_id: str, worker: WorkerProcess) -> None:
        while (code := worker.poll()) is None:
            if self.state.stopping.wait(self.cfg.jobs.poll_s):
                worker.kill()
                return
        with self._lock:
            if self._workers.get(job_id, ("", None))[0] != session_id:
                return  # replaced by a newer attempt
            self._workers.pop(job_id, None)
        job = self.jobs.get(job_id)
        if code == 0 and worker.result is not None:
            try:
                digest = self.install_result(job, str(worker.result["model_hash"]))
            except (JobFailed, ValueError, OSError, StoreError) as exc:
                self.jobs.update(job_id, state="failed", error=f"party1 could not install the result: {exc}")
                return
            self.jobs.finish(job_id, "succeeded", model_hash=digest)
            metrics.job_finished("succeeded", job.seconds)
            return
        last = last_error_line(worker.log_path) if worker.log_path is not None and code > 0 else ""
        error = f"party1 worker {exit_description(code)}" + (f": {last}" if last else "")
        self.jobs.update(job_id, state="failed", error=error, worker_exit=code)
        log.warning("job %s attempt %d failed on party1: %s", job_id, job.attempts if job else 0, error)
        metrics.job_attempt_failed()

    def cancel(self, job_id: str, keep_checkpoints: bool = False, by_admin: bool = False) -> None:
        """Stop the job's worker; a running job becomes cancelled (`by_admin`: also one whose
        worker failed when party0's stopped first). Its checkpoints are dropped, unless
        party0 says the job failed (kept for an identical re-filed request)."""
        with self._lock:
            current = self._workers.pop(job_id, None)
        if current is not None:
            current[1].kill()
        job = self.jobs.get(job_id)
        if job is None:
            return
        if job.state not in ("succeeded", "failed", "cancelled") or (by_admin and job.state == "failed"):
            self.jobs.finish(job_id, "cancelled", error="cancelled by the admin" if by_admin else "cancelled by party0")
        if not keep_checkpoints:
            CheckpointDir(self.jobs.job_dir(job_id) / "checkpoints").remove_all()

    def stop(self) -> None:
        with self._lock:
            workers = list(self._workers.values())
            self._workers.clear()
        for _, worker in workers:
            worker.kill()
        self.close()
