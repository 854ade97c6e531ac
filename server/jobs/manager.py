"""party0's job manager: queue, session attempts, completion (docs/JOBS.md).

One job at a time; further requests wait in the queue (FIFO). For a job:

1. re-check the request, pause training (no new round opens) and wait until no round is
   open (after `jobs.pause_training_after_s` the coordinator ends the open round: closed
   with its consistent uploads, or abandoned); T = the newest committed round, M_T its
   model; adopt the checkpoints of an identical failed job (`server.jobs.adoption`);
2. session attempt k (session id `<job id>.<k>`): start our worker, which listens on the
   configured MPC address and reports its port; send party1 the exact job parameters,
   where to connect and the dealer identity (peer StartJob); both workers join the
   session at the dealer service (run by the third operator, `[jobs] dealer`); watch our
   worker and party1's job state. If either worker dies or the dealer fails the session,
   the attempt fails and attempt k+1 resumes from the newest checkpoint both parties
   hold, in a fresh session (new id, new keys). The failure is blamed on the process that
   caused it (`server.workers.failures`); `jobs.max_attempts` failures in a row without a new
   common checkpoint fail the job, which keeps its checkpoints;
3. on success: install M̂ as global model T+1 (a chain that moved past M_T re-bases the job:
   it runs again from the newest model, `_rebase`), wait until party1 has installed the same
   model (hash compared), erase every target's shares on both parties, have both parties
   sign the erasure certificate (`server.evidence.certifier`), write the report with both
   parties' erasure receipts and the certificate's status, drop the checkpoints, resume
   training.

A request identical to a queued or running job (same targets, strategy and parameters) is
answered with that job; one sharing a target with it but asking otherwise is refused. The
admin's CancelJob ends a queued or running job (`server.jobs.cancellation`).
"""

from __future__ import annotations

import json
import logging
import ssl
import threading
import time
from dataclasses import asdict
from typing import Any, Protocol

from mpc.plane.rendezvous import ping
from mpc.plane.tls import TlsFiles, client_context
from proto.starfish.v1 import peer_pb2
from server import metrics, request_context
from server.jobs.adoption import adopt_checkpoints, adoptable, remove_checkpoints, stale_failed
from server.jobs.cancellation import CANCELLED_BY_ADMIN, JobCancelled, write_cancellation_report
from server.jobs.checkpoints import CheckpointDir, held_checkpoint
from server.jobs.evaluation import Evaluation, why_off
from server.jobs.evaluation_section import initial as initial_evaluation
from server.jobs.evaluation_section import interrupted as evaluation_interrupted
from server.jobs.job_report import build_report, dealer_record, release_notice, render_summary
from server.jobs.jobstore import TERMINAL, JobRecord, JobStore, new_job_id
from server.jobs.runner import JobFailed, JobRunnerBase
from server.jobs.validation import CheckedRequest, RequestError, check_history, history_clients
from server.party_state import PartyState
from server.peer_client import PeerClient, PeerRefused, Stopped
from server.store import ConflictError
from server.workers.failures import Failure, blame, observe_exit, observe_party1
from server.workers.process import WorkerProcess
from unlearning.weight_cap import principal_count

log = logging.getLogger(__name__)
PEER_CHECK_EVERY_S = 1.0  #: how often a running attempt asks party1 for its job state
PRUNE_EVERY_S = 60.0  #: how often an idle job manager removes failed jobs' checkpoints that expired
PEER_PROBE_S = 2.0  #: deadline of one look at party1's job state while diagnosing (no retries)
PEER_PROBES = 3  #: looks at party1's checkpoints before a failure is counted without progress
PEER_SETTLE_S = 3.0  #: how long a failed attempt waits for party1 to notice the session ended
DEALER_WAIT_MAX_S = 5.0  #: longest pause between two checks of an unreachable dealer service
WORKER_START_S = 120.0  #: a worker not taken from standby imports torch and CrypTen before it listens
CANCEL_WAIT_S = 30.0  #: how long CancelJob waits for a running job to stop before it answers


class ChainMoved(RuntimeError):
    """A training round committed after M_T: the job's result cannot become M_{T+1}."""


def _receipt_dict(msg) -> dict[str, Any]:
    return {
        "party": msg.party,
        "client": msg.client_id,
        "rounds": list(msg.rounds),
        "files_deleted": msg.files_deleted,
        "bytes_deleted": msg.bytes_deleted,
        "rows_deleted": msg.rows_deleted,
        "erased_at": msg.erased_at,
        "content_sha256": list(msg.content_sha256),
    }


class Certifies(Protocol):
    """What signs a finished job's erasure certificate: `server.evidence.certifier.Certifier`,
    handed in by the runtime (the evidence package sits above the jobs)."""

    def certify(self, job: JobRecord, receipts: dict[str, list[dict[str, Any]]]) -> dict[str, Any]: ...


class JobManager(JobRunnerBase):
    def __init__(self, state: PartyState, jobs: JobStore, peer: PeerClient, certifier: Certifies):
        super().__init__(state, jobs)
        self.peer = peer
        self.certifier = certifier
        self.wake = threading.Event()
        self._lock = threading.Lock()  #: orders submit, cancel and the choice of the next job
        self._current: str | None = None  #: the job the manager thread works on
        self._cancel = threading.Event()  #: the admin cancelled the current job
        self.thread = threading.Thread(target=self.run, name="job-manager", daemon=True)

    # -- requests --------------------------------------------------------------------------
    def submit(self, checked: CheckedRequest) -> JobRecord:
        """Check a parsed request (`validation.parse_request`) against the stored history and
        queue it with its canonical parameters (raises `RequestError`)."""
        if not self.cfg.jobs.dealer:
            raise RequestError(
                "precondition", "no dealer service is configured on party0 ([jobs] dealer = 'host:port')"
            )
        check_history(self.store, set(self.cfg.clients), checked.targets)
        with self._lock:
            existing = self._duplicate(checked)
            if existing is not None:
                log.info("job %s: the same request again, answered with this %s job", existing.job_id, existing.state)
                return existing
            job = self.jobs.add(new_job_id(), checked.targets, checked.strategy, checked.parameters_json)
        log.info("job %s queued: unlearn %s with %s", job.job_id, list(job.targets), job.strategy)
        self._warm_up()
        self.wake.set()
        return job

    def _duplicate(self, checked: CheckedRequest) -> JobRecord | None:
        """The queued or running job filed with the same targets, strategy and parameters, or
        None; a job sharing a target but asking otherwise makes the request conflict."""
        asked = (sorted(checked.targets), checked.strategy, checked.parameters_json)
        for job in self.jobs.all():
            shared = sorted(set(job.targets) & set(checked.targets))
            if job.state in TERMINAL or not shared:
                continue
            if (sorted(job.targets), job.strategy, job.parameters_json) == asked:
                return job
            raise RequestError(
                "precondition",
                f"client(s) {shared} are targets of job {job.job_id} ({job.state}) filed with other targets, "
                "strategy or parameters; wait until it ends or cancel it",
            )
        return None

    def cancel(self, job_id: str) -> JobRecord:
        """Admin CancelJob: a queued job ends now, the running one at the manager's next check
        (waits up to `CANCEL_WAIT_S`); returns the job. Raises `RequestError` for a job that
        is unknown, has ended or has installed its unlearned model."""
        with self._lock:
            job = self.jobs.get(job_id)
            if job is None:
                raise RequestError("not_found", f"no job {job_id!r}")
            if job.state in TERMINAL:
                raise RequestError("precondition", f"job {job_id} has already ended ({job.state})")
            if job.model_hash:
                raise RequestError(
                    "precondition", f"job {job_id} has installed its unlearned model and is erasing its targets"
                )
            if job_id != self._current:
                self._finish_cancelled(job, running=False)
                return self.jobs.get(job_id)  # type: ignore[return-value]
            self._cancel.set()
        self.wake.set()
        end = time.monotonic() + CANCEL_WAIT_S
        while (job := self.jobs.get(job_id)).state not in TERMINAL and time.monotonic() < end:  # type: ignore[union-attr]
            self.state.stopping.wait(min(self.cfg.jobs.poll_s, 0.1))
        return job  # type: ignore[return-value]

    def _finish_cancelled(self, job: JobRecord, running: bool) -> None:
        """Record a cancellation: party1 stops its worker and drops its checkpoints (the
        running job's worker here was killed by `_attempt`), party0 drops its own, the
        report says how far the job went, and training resumes."""
        if running:
            try:
                self.peer.unary("CancelJob", peer_pb2.PeerJobRef(job_id=job.job_id, by_admin=True))
            except (PeerRefused, Stopped) as exc:
                log.warning("job %s: party1 did not confirm the cancellation: %s", job.job_id, exc)
        folder = self.jobs.job_dir(job.job_id)
        CheckpointDir(folder / "checkpoints").remove_all()
        write_cancellation_report(folder, job)
        self.jobs.finish(job.job_id, "cancelled", error=CANCELLED_BY_ADMIN)
        if running:
            metrics.job_finished("cancelled", 0.0)
            self.state.training_paused.clear()
        log.info("job %s %s (%s)", job.job_id, CANCELLED_BY_ADMIN, job.step or "queued")

    # -- main loop -------------------------------------------------------------------------
    def start(self) -> None:
        for job in self.jobs.all():
            if job.state == "succeeded" and evaluation_interrupted(self.jobs.job_dir(job.job_id), render_summary):
                log.warning("job %s: its federated evaluation was interrupted by a restart; not done", job.job_id)
            if job.state == "running" and not job.model_hash and job.attempts:
                self.jobs.update(
                    job.job_id,
                    failures=job.failures + 1,
                    last_error=f"party0 restarted during session attempt {job.attempts}",
                    failed_process="party0",
                )
        if self.cfg.jobs.standby == "always" or self.jobs.next_job() is not None:
            self._warm_up()
        self.thread.start()

    def _warm_up(self) -> None:
        self.workers.fill()

    def run(self) -> None:
        stop = self.state.stopping
        next_prune = 0.0
        while not stop.is_set():
            with self._lock:
                job = self.jobs.next_job()
                self._current = job.job_id if job is not None else None
                self._cancel.clear()
            if job is None:
                if time.time() >= next_prune:
                    next_prune = time.time() + PRUNE_EVERY_S
                    self._prune_idle()
                self.wake.wait(self.cfg.jobs.poll_s)
                self.wake.clear()
                continue
            try:
                with request_context.scope(f"job-{job.job_id}"):
                    self._run(job)
            except Stopped:
                return
            except JobCancelled:
                self._finish_cancelled(self.jobs.get(job.job_id) or job, running=True)
            except JobFailed as exc:
                self._fail(job, str(exc), exc.process)
            except (RequestError, PeerRefused) as exc:
                self._fail(job, str(exc))
            except Exception as exc:  # a bug must not wedge the queue
                log.exception("job %s failed", job.job_id)
                self._fail(job, f"internal error: {exc}")

    def _prune_idle(self) -> None:
        latest = self.store.latest_committed()
        if latest < 0:
            return
        try:
            self.prune_failed(self.store.global_model_hash(latest) or "")
        except (PeerRefused, OSError) as exc:
            log.warning("removing failed jobs' checkpoints: %s", exc)

    def _fail(self, job: JobRecord, error: str, process: str = "") -> None:
        """The job failed: both parties keep its checkpoints for an identical re-filed request
        (server.jobs.adoption decides when they are removed)."""
        log.error("job %s failed%s: %s", job.job_id, f" ({process})" if process else "", error)
        try:
            self.peer.unary("CancelJob", peer_pb2.PeerJobRef(job_id=job.job_id, keep_checkpoints=True))
        except (PeerRefused, Stopped):
            pass
        if process:
            self.jobs.update(job.job_id, failed_process=process)
        self.jobs.finish(job.job_id, "failed", error=error)
        metrics.job_finished("failed", 0.0)
        self.state.resume_training()

    def _check_stop(self, cancellable: bool = True) -> None:
        """Raise `Stopped` when the party stops, `JobCancelled` when the admin cancelled the job
        (not `cancellable` once the job installed its unlearned model)."""
        if self.state.stopping.is_set():
            raise Stopped("party is stopping")
        if cancellable and self._cancel.is_set():
            raise JobCancelled()

    # -- one job ---------------------------------------------------------------------------
    def _run(self, job: JobRecord) -> None:
        if job.state == "queued":
            job = self._begin(job)
        self.state.pause_training(job.job_id)
        digest = self._unlearned_model(job)
        job = self.jobs.get(job.job_id)  # type: ignore[assignment]
        self.jobs.update(job.job_id, step="erasing")
        receipts = self._erase(job)
        self.jobs.update(job.job_id, step="signing the erasure certificate")
        certificate = self.certifier.certify(self.jobs.get(job.job_id), receipts)  # type: ignore[arg-type]
        finished = time.time()
        folder = self.jobs.job_dir(job.job_id)
        dealer = dealer_record(folder, self.cfg.jobs.dealer_label, self.cfg.jobs.dealer_independent)
        rounds = [i for i in self.store.committed_rounds() if i <= job.base_round]
        stage1 = {i: principal_count(self.store.round_members(i), self.store.round_principals(i)) for i in rounds}
        remaining = sorted(history_clients(self.store, job.base_round) - set(job.targets))
        dp1 = self.state.stage1_dp
        stage1_dp = dp1.releases(up_to=job.base_round) if dp1 is not None else []
        report = build_report(folder, job, digest, receipts, finished, dealer, stage1, len(remaining), stage1_dp)
        report["certificate"] = certificate
        report["federated_evaluation"] = initial_evaluation(not why_off(self.cfg), why_off(self.cfg))
        (folder / "report.json").write_text(json.dumps(report, indent=1, sort_keys=True))
        (folder / "summary.txt").write_text(render_summary(report))
        CheckpointDir(folder / "checkpoints").remove_all()
        self.peer.unary("CancelJob", peer_pb2.PeerJobRef(job_id=job.job_id))  # party1 drops its checkpoints
        notice = release_notice(report)
        if notice:
            log.warning("job %s: %s", job.job_id, notice)
        self.jobs.update(job.job_id, step=f"done: {notice}" if notice else "done")
        self.jobs.finish(job.job_id, "succeeded", model_hash=digest)
        metrics.job_finished("succeeded", report["job"]["seconds"])
        self.state.resume_training()
        log.info("job %s succeeded: model %s", job.job_id, digest[:12])
        if not why_off(self.cfg):
            self._evaluate(job.job_id, remaining)

    def _evaluate(self, job_id: str, remaining: list[str]) -> None:
        """The federated evaluation of a succeeded job, on a thread of its own: the manager
        goes on with the next job at once (server.jobs.evaluation)."""
        job = self.jobs.get(job_id)
        evaluation = Evaluation(self.state, self.peer, job, remaining, self.jobs.job_dir(job_id), render_summary)
        threading.Thread(target=evaluation.run, name=f"evaluation-{job_id}", daemon=True).start()

    def _begin(self, job: JobRecord) -> JobRecord:
        self.jobs.update(job.job_id, dequeued=time.time())
        check_history(self.store, set(self.cfg.clients), list(job.targets))  # parameters: parsed when filed
        self.state.pause_training(job.job_id)
        self._await_no_open_round(job.job_id)
        base = self.store.latest_committed()
        base_hash = self.store.global_model_hash(base) or ""
        self.jobs.update(
            job.job_id,
            state="running",
            started=time.time(),
            base_round=base,
            base_model_hash=base_hash,
            step="starting",
        )
        job = self.jobs.get(job.job_id)  # type: ignore[assignment]
        old = adoptable(self.jobs, job, base_hash)
        if old is not None and adopt_checkpoints(self.jobs, old.job_id, job, base_hash):
            log.info("job %s resumes from the checkpoints of the identical failed job %s", job.job_id, old.job_id)
        self.prune_failed(base_hash)
        return self.jobs.get(job.job_id)  # type: ignore[return-value]

    def _unlearned_model(self, job: JobRecord) -> str:
        """Session attempts until the unlearned model is installed as M_{T+1} on both parties.
        A chain that moved past M_T (a training round committed inside the job) re-bases the
        job on the current chain (`_rebase`) and runs it again: the target is never left in a
        model that training continues from."""
        while True:
            job = self.jobs.get(job.job_id)  # type: ignore[assignment]
            if not job.model_hash and (installed := self._installed_model(job)):
                self.jobs.update(job.job_id, model_hash=installed)  # installed just before a restart
                job = self.jobs.get(job.job_id)  # type: ignore[assignment]
            elif not job.model_hash and self._chain_moved(job):
                job = self._rebase(job)
            try:
                return self._await_peer(job, job.model_hash or self._mpc(job))
            except ChainMoved as exc:
                log.warning("job %s: %s", job.job_id, exc)

    def _installed_model(self, job: JobRecord) -> str:
        """The hash of M_{T+1} when this job installed it (no training round made it: one job
        runs at a time, with training paused), else ""."""
        latest = self.store.latest_committed()
        made_by = self.store.round_record(latest)
        if latest != job.base_round + 1 or (made_by is not None and made_by.state == "committed"):
            return ""
        if self.store.global_model_hash(job.base_round) != job.base_model_hash:
            return ""
        return self.store.global_model_hash(latest) or ""

    def _chain_moved(self, job: JobRecord) -> bool:
        """Whether M_T is no longer the newest global model (the job's result cannot follow it)."""
        latest = self.store.latest_committed()
        return latest != job.base_round or self.store.global_model_hash(latest) != job.base_model_hash

    def _rebase(self, job: JobRecord) -> JobRecord:
        """Run the job again from the current chain: wait until no round is open, T' = the newest
        committed round, drop both parties' checkpoints (computed from M_T, they cannot be
        resumed from M_T'), restart the attempt budget. Training stays paused throughout."""
        self._check_stop()
        self._await_no_open_round(job.job_id)
        base = self.store.latest_committed()
        base_hash = self.store.global_model_hash(base) or ""
        log.warning(
            "job %s: the global model moved from M_%d to M_%d during the job; it runs again from M_%d",
            job.job_id,
            job.base_round,
            base,
            base,
        )
        self.peer.unary("CancelJob", peer_pb2.PeerJobRef(job_id=job.job_id))  # party1 drops its checkpoints
        CheckpointDir(self.jobs.job_dir(job.job_id) / "checkpoints").remove_all()
        self.jobs.update(
            job.job_id,
            base_round=base,
            base_model_hash=base_hash,
            failures=0,
            progress_round=0,
            rebased=job.rebased + 1,
            step=f"re-based on global model {base} (a training round committed during the job)",
        )
        return self.jobs.get(job.job_id)  # type: ignore[return-value]

    def _await_no_open_round(self, job_id: str) -> None:
        """Wait until no training round is open. A round without uploads is ended at once
        (abandoned: nothing is lost); otherwise after `jobs.pause_training_after_s` the
        coordinator ends the open round (closed with its consistent uploads, or abandoned).
        The job's step says which round it waits for, with how many uploads, and until when."""
        self.jobs.update(job_id, step="waiting for the open training round to finish")
        # a coordinator step that began before the pause may still open a round: let it
        self.state.stopping.wait(3 * self.cfg.rounds.poll_s)
        give_up = time.time() + self.cfg.jobs.pause_training_after_s
        step = ""
        try:
            while (rec := self.store.current_round()) is not None and rec.state != "failed":
                self._check_stop()
                if not self.state.end_open_round.is_set():
                    step = self._round_wait_step(job_id, rec.round, give_up, step)
                self.state.stopping.wait(self.cfg.jobs.poll_s)
        finally:
            self.state.end_open_round.clear()

    def _round_wait_step(self, job_id: str, round_index: int, give_up: float, step: str) -> str:
        """Record why the job waits for round `round_index`, or have the coordinator end it now
        (no uploads held, or waited `jobs.pause_training_after_s`); returns the step recorded."""
        held = len(self.store.uploads(round_index))
        if held == 0 or time.time() >= give_up:
            why = "it holds no uploads" if held == 0 else f"waited {self.cfg.jobs.pause_training_after_s:.0f} s"
            new = f"ending training round {round_index} now: {why}"
            (log.info if held == 0 else log.warning)("job %s: %s", job_id, new)
            self.state.end_open_round.set()
        else:
            until = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(give_up))
            new = (
                f"waiting for training round {round_index} to end ({held} upload(s) held); it is ended at "
                f"{until} at the latest ([jobs] pause_training_after_s)"
            )
        if new != step:
            self.jobs.update(job_id, step=new)
        return new

    def prune_failed(self, base_hash: str, any_base: bool = False) -> None:
        """Remove failed jobs' checkpoints that can no longer be adopted, here and on party1."""
        for job_id in stale_failed(self.jobs, base_hash, self.cfg.jobs.keep_failed_checkpoints_s, any_base):
            self.peer.unary("CancelJob", peer_pb2.PeerJobRef(job_id=job_id))
            remove_checkpoints(self.jobs, job_id)

    def _mpc(self, job: JobRecord) -> str:
        """Session attempts until one finishes; returns the unlearned model's hash.

        The budget counts failed attempts since the job last made progress (a new
        checkpoint both parties hold): `jobs.max_attempts` failures in a row fail the job.
        """
        jc = self.cfg.jobs
        while True:
            self._check_stop()
            job = self.jobs.get(job.job_id)  # type: ignore[assignment]
            if job.failures >= jc.max_attempts:
                raise JobFailed(
                    f"{job.failures} session attempts failed without progress; last: {job.last_error}",
                    job.failed_process,
                )
            attempt = job.attempts + 1
            session_id = f"{job.job_id}.{attempt}"
            step = f"session attempt {attempt}: starting"
            if job.last_error:
                step += f" (attempt {job.attempts} failed: {job.last_error})"
            self.jobs.update(job.job_id, attempts=attempt, step=step)
            metrics.job_attempt_started()
            outcome = self._attempt(job, attempt, session_id)
            if isinstance(outcome, str):
                return outcome
            self._record_failure(job.job_id, attempt, outcome)
            self.state.stopping.wait(jc.retry_backoff_s)

    def _attempt(self, job: JobRecord, attempt: int, session_id: str) -> str | Failure:
        """One session attempt: the unlearned model's hash, or why it failed."""
        jc = self.cfg.jobs
        worker = None
        try:
            self._await_dealer(job.job_id, attempt)
            worker = self.start_worker(job, attempt, session_id, jc.mpc_host, jc.mpc_port)
            self._announce(job, session_id, worker.wait_listening(jc.session_timeout_s + WORKER_START_S))
            outcome = self._watch(job, worker)
        except OSError as exc:
            outcome = Failure("party0", f"party0 could not start the session: {exc}")
        finally:
            if worker is not None and worker.poll() is None:
                worker.kill()
        if outcome is None and worker is not None and worker.result is not None:
            return self._install(job, str(worker.result["model_hash"]))
        return outcome or Failure("party0 worker", "party0 worker ended without a result")

    def _dealer_tls(self) -> ssl.SSLContext:
        tls = self.cfg.tls
        return client_context(TlsFiles(tls.ca, tls.cert, tls.key))

    def _install(self, job: JobRecord, claimed_hash: str) -> str:
        """Install the unlearned model as M_{T+1}; while a training round T+1 is in progress
        (the chain has one writer at a time: `Store.install_global_model`) wait for it to end,
        with training paused. A chain that moved past M_T raises `ChainMoved` (the job re-bases)."""
        try:
            while True:
                try:
                    return self.install_result(job, claimed_hash)
                except ConflictError as exc:
                    if self._chain_moved(job):
                        raise ChainMoved(f"the unlearned model cannot follow the chain: {exc}") from None
                    log.warning("job %s waits to install its model: %s", job.job_id, exc)
                    self.jobs.update(job.job_id, step=f"waiting to install the unlearned model: {exc}")
                    self.state.end_open_round.set()  # the coordinator ends that round now
                self._check_stop()
                self.state.stopping.wait(self.cfg.jobs.poll_s)
        finally:
            self.state.end_open_round.clear()

    def _await_dealer(self, job_id: str, attempt: int) -> None:
        """Wait until the dealer service answers a TLS hello (`ping_dealer`; an attempt is not
        spent on a dealer that is down, as none is spent on an unreachable party1)."""
        host, port = self.cfg.jobs.dealer_address
        delay = self.cfg.jobs.retry_backoff_s
        while True:
            self._check_stop()
            try:
                ping(host, port, self._dealer_tls(), self.cfg.jobs.dealer_identity, PEER_PROBE_S, "the dealer")
                return
            except OSError as exc:
                step = f"session attempt {attempt}: waiting for the dealer service at {self.cfg.jobs.dealer} ({exc})"
                self.jobs.update(job_id, step=step)
                log.warning("job %s: %s", job_id, step)
            self.state.stopping.wait(delay)
            delay = min(2 * delay, DEALER_WAIT_MAX_S)

    def _record_failure(self, job_id: str, attempt: int, failure: Failure) -> None:
        """Note the failure; a new checkpoint both parties hold resets the attempt budget."""
        job = self.jobs.get(job_id)
        assert job is not None
        theirs = None
        for _ in range(PEER_PROBES):  # a loaded party1 may miss one short deadline
            theirs = self.peer.try_unary("GetPeerJob", peer_pb2.PeerJobRef(job_id=job_id), PEER_PROBE_S)
            if theirs is not None:
                break
        mine = held_checkpoint(self.jobs.job_dir(job_id))
        common = min(mine, theirs.checkpoint_round) if theirs is not None else job.progress_round
        progressed = common > job.progress_round
        failures = 1 if progressed else job.failures + 1
        self.jobs.update(
            job_id,
            failures=failures,
            progress_round=max(common, job.progress_round),
            last_error=failure.error,
            failed_process=failure.process,
            step=f"session attempt {attempt} failed ({failure.process}); retrying",
        )
        metrics.job_attempt_failed()
        log.warning(
            "job %s attempt %d failed (%s): %s; %d of %d attempts used since the last progress "
            "(common checkpoint: unlearning round %d)",
            job_id,
            attempt,
            failure.process,
            failure.error,
            failures,
            self.cfg.jobs.max_attempts,
            max(common, job.progress_round),
        )

    def _announce(self, job: JobRecord, session_id: str, port: int) -> None:
        """Tell party1 the attempt: job parameters, where our worker listens, which dealer."""
        jc = self.cfg.jobs
        rendezvous = f"tls://{jc.advertised_host}:{port}"
        self.jobs.update(job.job_id, rendezvous=rendezvous)
        self.peer.unary(
            "StartJob",
            peer_pb2.JobSpec(
                job_id=job.job_id,
                targets=list(job.targets),
                strategy=job.strategy,
                parameters_json=job.parameters_json,
                rendezvous=rendezvous,
                base_round=job.base_round,
                base_model_hash=job.base_model_hash,
                session_id=session_id,
                dealer_identity=jc.dealer_identity,
                adopt_from=job.adopted_from,
            ),
        )

    def _watch(self, job: JobRecord, worker: WorkerProcess) -> Failure | None:
        """Wait for our worker; returns None on success, else why the attempt failed."""
        next_peer_check = time.time() + PEER_CHECK_EVERY_S
        while True:
            self._check_stop()
            code = worker.poll()
            if code is not None:
                return None if code == 0 and worker.result is not None else self._diagnose(job, worker)
            if time.time() >= next_peer_check:
                next_peer_check = time.time() + PEER_CHECK_EVERY_S
                theirs = self.peer.try_unary("GetPeerJob", peer_pb2.PeerJobRef(job_id=job.job_id), PEER_PROBE_S)
                if theirs is not None and theirs.state == "failed":
                    # party1's worker often fails because ours closed the session: let ours exit first
                    end = time.time() + PEER_SETTLE_S
                    while worker.poll() is None and time.time() < end:
                        self.state.stopping.wait(self.cfg.jobs.poll_s)
                    failure = self._diagnose(job, worker, theirs)
                    worker.kill()
                    return failure
            self.state.stopping.wait(self.cfg.jobs.poll_s)

    def _diagnose(self, job: JobRecord, worker: WorkerProcess, theirs=None) -> Failure:
        """Blame the process that made the attempt fail (server.workers.failures); the dealer
        service is named by a worker that exits because the dealer failed its session."""
        observed = [observe_exit("party0 worker", worker.poll(), worker.log_path)]
        end = time.time() + PEER_SETTLE_S
        while theirs is None or (theirs.state == "running" and time.time() < end):
            theirs = self.peer.try_unary("GetPeerJob", peer_pb2.PeerJobRef(job_id=job.job_id), PEER_PROBE_S)
            if theirs is None:
                break
            if theirs.state == "running":
                self.state.stopping.wait(self.cfg.jobs.poll_s)
        observed.append(observe_party1(theirs))
        return blame(observed)

    def _await_peer(self, job: JobRecord, digest: str) -> str:
        """Wait until party1 installed the same model; a failed party1 gets another attempt."""
        while True:
            self._check_stop(cancellable=False)
            theirs = self.peer.unary("GetPeerJob", peer_pb2.PeerJobRef(job_id=job.job_id))
            if theirs.state == "succeeded":
                if theirs.checkpoint_hash != digest:
                    raise JobFailed(
                        f"party1's unlearned model {theirs.checkpoint_hash[:12]} differs from party0's {digest[:12]}"
                    )
                return digest
            if theirs.state in ("failed", "cancelled", "unknown"):
                log.warning(
                    "job %s: party1 has no result (%s); another session attempt",
                    job.job_id,
                    theirs.error or theirs.state,
                )
                again = self._mpc(job)
                if again != digest:
                    raise JobFailed("a repeated session produced another model")
            self.state.stopping.wait(self.cfg.jobs.poll_s)

    def _erase(self, job: JobRecord) -> dict[str, list[dict[str, Any]]]:
        """Erase every target on both parties; receipts are kept per target (restart-safe)."""
        path = self.jobs.job_dir(job.job_id) / "erasure.json"
        receipts: dict[str, list[dict[str, Any]]] = json.loads(path.read_text()) if path.exists() else {}
        for target in job.targets:
            if target in receipts:
                continue
            theirs = self.peer.unary("EraseClient", peer_pb2.EraseClientRequest(client_id=target))
            mine = asdict(self.store.erase_client(target))
            metrics.client_erased()
            receipts[target] = [mine, _receipt_dict(theirs)]
            path.write_text(json.dumps(receipts, indent=1, sort_keys=True))
            log.info("job %s: client %s erased on both parties", job.job_id, target)
        return receipts
