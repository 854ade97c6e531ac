"""party0's job manager: queue, session attempts, completion (DESIGN §2, §6).

One job at a time; further requests wait in the queue (FIFO). For a job:

1. re-check the request, pause training (no new round opens) and wait until no round is
   open; T = the newest committed round, M_T its model;
2. session attempt k: pick the rendezvous port (config or a free port), hand a started
   dealer process the session (the third operator's process in a local deployment), send party1 the
   exact job parameters and rendezvous (peer StartJob), start our worker; watch our
   worker and party1's job state. If either worker or the dealer dies, the attempt fails
   and attempt k+1 resumes from the newest checkpoint both parties hold, in a fresh
   session (new port, new dealer), up to `jobs.max_attempts`;
3. on success: install M̂ as global model T+1, wait until party1 has installed the same
   model (hash compared), erase every target's shares on both parties, have both parties
   sign the erasure certificate (`server.evidence.certifier`), write the report with both
   parties' erasure receipts and the certificate's status, drop the checkpoints, resume
   training.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import asdict
from typing import Any

from proto.starfish.v1 import peer_pb2
from server import metrics, request_context
from server.evidence.certifier import Certifier
from server.jobs.checkpoints import CheckpointDir
from server.jobs.jobstore import JobRecord, JobStore, new_job_id
from server.jobs.process import Standby, spawn_dealer, start_dealer_session, stop_process
from server.jobs.report import build_report, render_summary
from server.jobs.runner import JobFailed, JobRunnerBase
from server.jobs.validation import RequestError, check_request
from server.local import free_port
from server.peer_client import PeerClient, PeerRefused, Stopped
from server.state import PartyState

log = logging.getLogger(__name__)
PEER_CHECK_EVERY_S = 1.0  #: how often a running attempt asks party1 for its job state


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


class JobManager(JobRunnerBase):
    def __init__(self, state: PartyState, jobs: JobStore, peer: PeerClient, certifier: Certifier):
        super().__init__(state, jobs)
        self.peer = peer
        self.certifier = certifier
        self.dealers = Standby(spawn_dealer, jobs.root / "logs", "dealer", self.cfg.jobs.standby != "off")
        self.wake = threading.Event()
        self.thread = threading.Thread(target=self.run, name="job-manager", daemon=True)

    # -- requests --------------------------------------------------------------------------
    def submit(self, targets: list[str], strategy: str, parameters: dict[str, Any]) -> JobRecord:
        """Validate and queue an unlearn request (raises `RequestError`)."""
        checked = check_request(self.store, set(self.cfg.clients), targets, strategy, parameters)
        job = self.jobs.add(new_job_id(), checked.targets, checked.strategy, checked.parameters)
        log.info("job %s queued: unlearn %s with %s", job.job_id, list(job.targets), job.strategy)
        self._warm_up()
        self.wake.set()
        return job

    # -- main loop -------------------------------------------------------------------------
    def start(self) -> None:
        if self.cfg.jobs.standby == "always" or self.jobs.next_job() is not None:
            self._warm_up()
        self.thread.start()

    def _warm_up(self) -> None:
        self.workers.fill()
        self.dealers.fill()

    def close(self) -> None:
        super().close()
        self.dealers.close()

    def run(self) -> None:
        stop = self.state.stopping
        while not stop.is_set():
            job = self.jobs.next_job()
            if job is None:
                self.wake.wait(self.cfg.jobs.poll_s)
                self.wake.clear()
                continue
            try:
                with request_context.scope(f"job-{job.job_id}"):
                    self._run(job)
            except Stopped:
                return
            except (JobFailed, RequestError, PeerRefused) as exc:
                self._fail(job, str(exc))
            except Exception as exc:  # a bug must not wedge the queue
                log.exception("job %s failed", job.job_id)
                self._fail(job, f"internal error: {exc}")

    def _fail(self, job: JobRecord, error: str) -> None:
        log.error("job %s failed: %s", job.job_id, error)
        try:
            self.peer.unary("CancelJob", peer_pb2.PeerJobRef(job_id=job.job_id))
        except (PeerRefused, Stopped):
            pass
        self.jobs.finish(job.job_id, "failed", error=error)
        metrics.job_finished("failed", 0.0)
        CheckpointDir(self.jobs.job_dir(job.job_id) / "checkpoints").remove_all()
        self.state.training_paused.clear()

    def _check_stop(self) -> None:
        if self.state.stopping.is_set():
            raise Stopped("party is stopping")

    # -- one job ---------------------------------------------------------------------------
    def _run(self, job: JobRecord) -> None:
        if job.state == "queued":
            job = self._begin(job)
        self.state.training_paused.set()
        digest = job.model_hash or self._mpc(job)
        job = self.jobs.get(job.job_id)  # type: ignore[assignment]
        digest = self._await_peer(job, digest)
        self.jobs.update(job.job_id, step="erasing")
        receipts = self._erase(job)
        self.jobs.update(job.job_id, step="signing the erasure certificate")
        certificate = self.certifier.certify(self.jobs.get(job.job_id), receipts)  # type: ignore[arg-type]
        finished = time.time()
        report = build_report(self.jobs.job_dir(job.job_id), job, digest, receipts, finished)
        report["certificate"] = certificate
        folder = self.jobs.job_dir(job.job_id)
        (folder / "report.json").write_text(json.dumps(report, indent=1, sort_keys=True))
        (folder / "summary.txt").write_text(render_summary(report))
        CheckpointDir(folder / "checkpoints").remove_all()
        self.peer.unary("CancelJob", peer_pb2.PeerJobRef(job_id=job.job_id))  # party1 drops its checkpoints
        self.jobs.update(job.job_id, step="done")
        self.jobs.finish(job.job_id, "succeeded", model_hash=digest)
        metrics.job_finished("succeeded", report["job"]["seconds"])
        self.state.training_paused.clear()
        log.info("job %s succeeded: model %s", job.job_id, digest[:12])

    def _begin(self, job: JobRecord) -> JobRecord:
        check_request(self.store, set(self.cfg.clients), list(job.targets), job.strategy, job.parameters)
        self.state.training_paused.set()
        self.jobs.update(job.job_id, step="waiting for the open training round to finish")
        # a coordinator step that began before the pause may still open a round: let it
        self.state.stopping.wait(3 * self.cfg.rounds.poll_s)
        while (rec := self.store.current_round()) is not None and rec.state != "failed":
            self._check_stop()
            self.state.stopping.wait(self.cfg.jobs.poll_s)
        base = self.store.latest_committed()
        self.jobs.update(
            job.job_id,
            state="running",
            started=time.time(),
            base_round=base,
            base_model_hash=self.store.global_model_hash(base) or "",
            step="starting",
        )
        return self.jobs.get(job.job_id)  # type: ignore[return-value]

    def _mpc(self, job: JobRecord) -> str:
        """Session attempts until one finishes; returns the unlearned model's hash."""
        jc = self.cfg.jobs
        last_error = ""
        while True:
            self._check_stop()
            job = self.jobs.get(job.job_id)  # type: ignore[assignment]
            attempt = job.attempts + 1
            if attempt > jc.max_attempts:
                raise JobFailed(f"{jc.max_attempts} session attempts failed; last: {last_error}")
            port = jc.mpc_port + attempt - 1 if jc.mpc_port else free_port()
            rendezvous = f"tcp://{jc.mpc_host}:{port}"
            self.jobs.update(job.job_id, attempts=attempt, rendezvous=rendezvous, step="starting session")
            dealer = worker = None
            outcome: str | None = "the session could not start"
            metrics.job_attempt_started()
            try:
                dealer = self._start_dealer(job.job_id, attempt, port)
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
                    ),
                )
                worker = self.start_worker(job, attempt, jc.mpc_host, port)
                outcome = self._watch(job, worker)
            except OSError as exc:
                outcome = f"could not start the session's processes: {exc}"
            finally:
                if worker is not None and worker.poll() is None:
                    worker.kill()
                stop_process(dealer)  # its session is over (finished or failed)
            if outcome is None and worker is not None and worker.result is not None:
                return self.install_result(job, str(worker.result["model_hash"]))
            last_error = outcome or "worker ended without a result"
            metrics.job_attempt_failed()
            log.warning(
                "job %s attempt %d failed: %s; resuming from the last common checkpoint",
                job.job_id,
                attempt,
                last_error,
            )
            self.state.stopping.wait(jc.retry_backoff_s)

    def _start_dealer(self, job_id: str, attempt: int, port: int):
        """Hand a started dealer process this attempt's session (pid and log noted in the job dir)."""
        jc = self.cfg.jobs
        folder = self.jobs.job_dir(job_id)
        dealer, dealer_log = self.dealers.take()
        (folder / "dealer.pid").write_text(str(dealer.pid))
        link = folder / f"dealer-{attempt}.log"
        if not link.exists():
            link.symlink_to(dealer_log)
        start_dealer_session(dealer, jc.mpc_host, port, self.cfg.precision_bits, jc.session_timeout_s, jc.allow_remote)
        return dealer

    def _watch(self, job: JobRecord, worker) -> str | None:
        """Wait for our worker; returns None on success, else why the attempt failed."""
        next_peer_check = time.time() + PEER_CHECK_EVERY_S
        while True:
            self._check_stop()
            code = worker.poll()
            if code is not None:
                return None if code == 0 and worker.result is not None else f"party0 worker exited with code {code}"
            if time.time() >= next_peer_check:
                next_peer_check = time.time() + PEER_CHECK_EVERY_S
                theirs = self.peer.unary("GetPeerJob", peer_pb2.PeerJobRef(job_id=job.job_id))
                if theirs.state == "failed":
                    worker.kill()
                    return f"party1: {theirs.error}"
            self.state.stopping.wait(self.cfg.jobs.poll_s)

    def _await_peer(self, job: JobRecord, digest: str) -> str:
        """Wait until party1 installed the same model; a failed party1 gets another attempt."""
        while True:
            self._check_stop()
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
