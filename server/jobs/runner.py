"""What both parties' job runners share: worker specs, the worker's message handler
(progress, checkpoints, posting tasks) and installing the unlearned model.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from proto.wire import model_hash
from server import metrics
from server.jobs import refused_answers
from server.jobs.jobstore import JobRecord, JobStore
from server.party_state import PartyState
from server.peer_client import PeerClient
from server.store import TaskRecord
from server.upload_check import CheckFailed, lead_task_check
from server.upload_check_peer import await_task_verdicts
from server.workers.process import Handler, Standby, WorkerProcess, WorkerSpec, spawn_worker

log = logging.getLogger(__name__)
#: what a job's worker runs (`server.workers.worker` imports it by this name)
JOB_SESSION_MODULE = "server.jobs.attempt"
CHECK_WAIT_S = 45.0  #: bound on a job step's answer check (the worker waits 60 s for the reply)


class JobFailed(RuntimeError):
    """The job cannot succeed (bad input found late, attempts exhausted, parties disagree);
    `process` names the process blamed for it, when one is."""

    def __init__(self, message: str, process: str = ""):
        super().__init__(message)
        self.process = process


class JobRunnerBase:
    def __init__(self, state: PartyState, jobs: JobStore):
        self.state = state
        self.store = state.store
        self.cfg = state.config
        self.jobs = jobs
        spawn = partial(spawn_worker, JOB_SESSION_MODULE)
        self.workers = Standby(spawn, jobs.root / "logs", "worker", self.cfg.jobs.standby != "off")
        self._costs_recorded: set[str] = set()
        self.peer: PeerClient | None = None  #: party0's link to party1 (the job manager sets it)

    def close(self) -> None:
        """Stop the processes kept in standby."""
        self.workers.close()

    # -- worker ----------------------------------------------------------------------------
    def spec(self, job: JobRecord, attempt: int, session_id: str, host: str, port: int) -> WorkerSpec:
        """The worker's attempt: `host:port` is party0's listening address (party0 binds it,
        party1 connects to it)."""
        jc = self.cfg.jobs
        dealer_host, dealer_port = jc.dealer_address
        tls = self.cfg.tls
        return WorkerSpec(
            job_id=job.job_id,
            role=self.cfg.role,
            attempt=attempt,
            data_dir=str(Path(self.cfg.data_dir).resolve()),
            job_dir=str(self.jobs.job_dir(job.job_id).resolve()),
            arch=self.store.global_model(0).arch,
            targets=list(job.targets),
            strategy=job.strategy,
            parameters=job.parameters,
            base_round=job.base_round,
            base_model_hash=job.base_model_hash,
            session_id=session_id,
            peer_host=host,
            peer_port=port,
            peer_identity=tls.peer_name,
            dealer_host=dealer_host,
            dealer_port=dealer_port,
            dealer_identity=jc.dealer_identity,
            tls_ca=str(Path(tls.ca).resolve()),
            tls_cert=str(Path(tls.cert).resolve()),
            tls_key=str(Path(tls.key).resolve()),
            precision_bits=self.cfg.precision_bits,
            session_timeout_s=jc.session_timeout_s,
            step_check=jc.step_check,
            task_timeout_s=jc.task_timeout_s,
            task_poll_s=jc.task_poll_s,
            dp={} if self.cfg.dp.settings is None else asdict(self.cfg.dp.settings),
        )

    def start_worker(self, job: JobRecord, attempt: int, session_id: str, host: str, port: int) -> WorkerProcess:
        folder = self.jobs.job_dir(job.job_id)
        path = self.spec(job, attempt, session_id, host, port).write(folder / f"attempt-{attempt}.json")
        proc, log_path = self.workers.take()
        worker = WorkerProcess.assign(proc, log_path, path, self.handler(job.job_id))
        log.info("job %s attempt %d: worker %d started (session %s)", job.job_id, attempt, worker.pid, session_id)
        return worker

    def handler(self, job_id: str) -> Handler:
        def handle(msg: dict[str, Any]) -> dict[str, Any] | None:
            kind = msg.get("kind")
            if kind == "progress":
                self.jobs.update(
                    job_id,
                    step=str(msg["step"]),
                    unlearning_round=int(msg["t"]),
                    total_rounds=int(msg["total"]),
                    bytes=int(msg["bytes"]),
                )
            elif kind == "checkpoint":
                self.jobs.update(job_id, unlearning_round=int(msg["t"]), checkpoint_round=int(msg["t"]))
            elif kind == "session":
                self.record_session(job_id, msg)
            elif kind == "post_tasks":
                self.post_tasks(job_id, msg)
                return {"ok": True}
            elif kind == "check_tasks":
                try:
                    return {"ok": True, "refused": self.check_tasks(job_id, msg)}
                except CheckFailed as exc:  # the worker fails its attempt, blaming `process`
                    return {"ok": True, "failed": {"process": exc.process, "error": str(exc)}}
            return None

        return handle

    def record_session(self, job_id: str, msg: dict[str, Any]) -> None:
        """Note which dealer (address, certificate identity and fingerprint) served a session
        attempt: `sessions.json` in the job directory, read by the report."""
        path = self.jobs.job_dir(job_id) / "sessions.json"
        sessions = json.loads(path.read_text()) if path.exists() else []
        dealer = dict(msg.get("dealer") or {})
        sessions.append(
            {
                "session_id": str(msg.get("session_id", "")),
                "dealer_address": str(dealer.get("address", "")),
                "dealer_identity": str(dealer.get("identity", "")),
                "dealer_certificate_sha256": str(dealer.get("certificate_sha256", "")),
                "dealer_independent": self.cfg.jobs.dealer_independent,
                "opened": time.time(),
            }
        )
        tmp = path.with_name("sessions.json.tmp")
        tmp.write_text(json.dumps(sessions, indent=1))
        tmp.replace(path)

    def post_tasks(self, job_id: str, msg: dict[str, Any]) -> None:
        """Store the task model M̂_t (public) and post one task per client on this party."""
        name = str(msg["model_file"])
        if Path(name).name != name:
            raise ValueError("task model file must be a plain file name")
        params = np.load(self.jobs.job_dir(job_id) / "models" / name, allow_pickle=False)
        digest = self.store.put_model(self.store.global_model(0).arch, params)
        if digest != msg["model_hash"]:
            raise ValueError("task model does not match its hash")
        for client, tid in sorted(dict(msg["tasks"]).items()):
            self.state.post_task(
                TaskRecord(
                    str(tid),
                    str(client),
                    job_id,
                    int(msg["task_kind"]),
                    int(msg["unlearning_round"]),
                    int(msg["original_round"]),
                    digest,
                    float(msg["deadline"]),
                )
            )

    def check_tasks(self, job_id: str, msg: dict[str, Any]) -> dict[str, str]:
        """The answers of one job step (client → task id, held by both parties) that fail the
        input check, client → reason (server.upload_check: party0 leads the batch, party1
        reads its own verdicts); logged and recorded for the report and JobStatus."""
        tasks = {str(c): str(t) for c, t in dict(msg["tasks"]).items()}
        if not self.cfg.validation.enabled or not tasks:
            return {}
        if self.peer is not None:
            verdicts = lead_task_check(self.cfg, self.store, self.peer, tasks, time.time() + CHECK_WAIT_S)
        else:
            verdicts = await_task_verdicts(self.state, job_id, tasks, CHECK_WAIT_S)
        refused = {client: v for client, v in verdicts.items() if not v.accepted}
        step, task = int(msg.get("unlearning_round", 0)), str(msg.get("task", ""))
        for client, verdict in sorted(refused.items()):
            if self.peer is not None:  # party1 counted it when it recorded the verdict
                metrics.input_refused("task", verdict.failed)
            log.warning("job %s round %d: %s answer of %s refused: %s", job_id, step, task, client, verdict.reason())
        entries = [
            {"client": c, "task_id": tasks[c], "unlearning_round": step, "task": task, "reason": v.reason()}
            for c, v in sorted(refused.items())
        ]
        if entries:
            refused_answers.record(self.jobs.job_dir(job_id), entries)
        return {client: verdict.reason() for client, verdict in refused.items()}

    # -- result ----------------------------------------------------------------------------
    def install_result(self, job: JobRecord, claimed_hash: str) -> str:
        """Make the worker's unlearned model the global model M_{T+1} (idempotent)."""
        folder = self.jobs.job_dir(job.job_id)
        params = np.load(folder / "result-model.npy", allow_pickle=False)
        m0 = self.store.global_model(0)
        if model_hash(m0.arch, params) != claimed_hash:
            raise JobFailed("the worker's result file does not match the hash it reported")
        digest = self.store.install_global_model(job.base_round + 1, m0.arch, params, m0.lr)
        self.jobs.update(job.job_id, model_hash=digest)
        self._record_costs(job.job_id)
        log.info("job %s: unlearned model %s installed as global model %d", job.job_id, digest[:12], job.base_round + 1)
        return digest

    def _record_costs(self, job_id: str) -> None:
        """Per-step time and bytes of the finished run, once per job (`server.metrics.job_costs`)."""
        if job_id in self._costs_recorded:
            return
        self._costs_recorded.add(job_id)
        report = json.loads((self.jobs.job_dir(job_id) / "worker-report.json").read_text())
        metrics.job_costs(report.get("costs", {}))
