"""RPC handlers of unlearning jobs: the admin side (party0) and the peer side (party1).

They extend the Stage I services: `JobAdminService` answers Unlearn, GetJobStatus,
WatchJob, GetJobModel, GetJobReport, GetJobCertificate, CancelJob and ListJobs; `JobPeerService`
answers StartJob, GetPeerJob, CancelJob and SignCertificate. Every admin call needs the
admin credential, except Unlearn filed by a client for itself alone with its client
credential (docs/JOBS.md §1).
"""

from __future__ import annotations

import json
import logging
import time
from functools import partial
from pathlib import Path

import grpc

from proto.starfish.v1 import admin_pb2, common_pb2, peer_pb2
from proto.wire import model_messages
from server.admin_service import AdminService
from server.auth import ADMIN_TOKEN_KEY, CLIENT_ID_KEY, authenticate_client, require_admin, require_peer
from server.evidence.attestation import AttestationRefused
from server.evidence.certifier import CERTIFICATE_FILE, Attestor, NoSigningKey
from server.evidence.statement import ViewError
from server.jobs import evaluation_section, refused_answers
from server.jobs.cancellation import CANCELLED_NOTHING_ERASED
from server.jobs.checkpoints import held_checkpoint
from server.jobs.evaluation_peer import EvaluationRefused, FollowerEvaluations
from server.jobs.follower import JobFollower
from server.jobs.jobstore import TERMINAL, JobRecord
from server.jobs.manager import JobManager
from server.jobs.validation import (
    MAX_STATEMENT_BYTES,
    MAX_STATEMENT_DEPTH,
    CheckedRequest,
    RequestError,
    bounded_json,
    parse_request,
)
from server.party_state import PartyState
from server.peer_client import PeerClient
from server.peer_service import PeerService
from server.store import StoreError

STATES = {
    "queued": admin_pb2.JOB_STATE_QUEUED,
    "running": admin_pb2.JOB_STATE_RUNNING,
    "succeeded": admin_pb2.JOB_STATE_SUCCEEDED,
    "failed": admin_pb2.JOB_STATE_FAILED,
    "cancelled": admin_pb2.JOB_STATE_CANCELLED,
}
CODES = {
    "invalid": grpc.StatusCode.INVALID_ARGUMENT,
    "not_found": grpc.StatusCode.NOT_FOUND,
    "precondition": grpc.StatusCode.FAILED_PRECONDITION,
    "conflict": grpc.StatusCode.ALREADY_EXISTS,
}
WATCH_POLL_S = 0.2
log = logging.getLogger(__name__)


def job_privacy(job_dir: Path) -> admin_pb2.JobPrivacy | None:
    """The (ε, δ) of a finished job's report (None before the report exists or without DP)."""
    path = job_dir / "report.json"
    if not path.exists():
        return None
    privacy = json.loads(path.read_text()).get("privacy") or {}
    if not privacy.get("dp"):
        return None
    return admin_pb2.JobPrivacy(
        dp=True,
        delta=float(privacy["delta"]),
        epsilon=float(privacy["epsilon"]),
        client_epsilon={c: float(e) for c, e in privacy["per_client"].items()},
    )


def job_status(job: JobRecord, dealer: str = "", privacy: admin_pb2.JobPrivacy | None = None) -> admin_pb2.JobStatus:
    return admin_pb2.JobStatus(
        privacy=privacy,
        dealer=dealer,
        job_id=job.job_id,
        state=STATES[job.state],
        step=job.step,
        unlearning_round=job.unlearning_round,
        progress=job.progress,
        seconds=job.seconds,
        bytes=job.bytes,
        error=job.error,
        attempt=job.attempts,
        failures_since_progress=job.failures,
        last_error=job.last_error,
        failed_process=job.failed_process,
        adopted_from=job.adopted_from,
    )


class JobAdminService(AdminService):
    def __init__(self, state: PartyState, peer: PeerClient, manager: JobManager):
        super().__init__(state, peer)
        self.manager = manager
        self.jobs = manager.jobs

    def _status(self, job: JobRecord) -> admin_pb2.JobStatus:
        folder = self.jobs.job_dir(job.job_id)
        privacy = job_privacy(folder) if job.state == "succeeded" else None
        status = job_status(job, self.cfg.jobs.dealer_label, privacy)
        evaluation = evaluation_section.read(folder) if job.state == "succeeded" else None
        if evaluation is not None:
            status.federated_evaluation.CopyFrom(evaluation_section.to_proto(evaluation))
        for entry in refused_answers.read(folder):
            why = f"round {entry['unlearning_round']} {entry['task']}: {entry['reason']}"
            status.refused_answers.add(client_id=entry["client"], reason=why)
        return status

    def _job(self, request, context) -> JobRecord:
        job = self.jobs.get(request.job_id)
        if job is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no job {request.job_id!r}")
        return job

    def _authorize_unlearn(self, request, context) -> bool:
        """The admin may file any request; a client only one whose sole target is itself.
        Returns True for a client's own request."""
        keys = {k for k, _ in (context.invocation_metadata() or ())}
        if ADMIN_TOKEN_KEY in keys or CLIENT_ID_KEY not in keys:
            require_admin(self.cfg, context)
            return False
        client = authenticate_client(self.cfg, context)
        if list(request.targets) != [client]:
            context.abort(
                grpc.StatusCode.PERMISSION_DENIED,
                f"client {client!r} may only request its own unlearning; other targets need the admin credential",
            )
        return True

    def _parse_request(self, request, context, own: bool) -> CheckedRequest:
        """The request parsed once (`validation.parse_request`) under the operator's policy
        (server.unlearning_policy): the operator's parameters that the strategy declares fill
        what the admin leaves out (within `[unlearning.bounds]`); a client's own request runs
        Starfish with them and is refused when it names anything else (compared in canonical
        form, before any bound)."""
        cfg = self.cfg
        parse = partial(
            parse_request,
            list(request.targets),
            min_cohort=cfg.privacy.min_cohort,
        )
        checked = parse(
            request.strategy,
            request.parameters_json,
            policy=None if own else cfg.unlearning,
            defaults=cfg.unlearning.for_strategy(request.strategy),
        )
        if not own:
            return checked
        operators = parse("starfish", "", policy=cfg.unlearning, defaults=cfg.unlearning.for_strategy("starfish"))
        if (checked.strategy, checked.parameters_json) != (operators.strategy, operators.parameters_json):
            context.abort(
                grpc.StatusCode.PERMISSION_DENIED,
                "a client's own unlearning runs Starfish with the operator's parameters "
                f"{json.dumps(dict(cfg.unlearning.parameters), sort_keys=True)}; "
                "only the admin may choose the strategy or parameters",
            )
        return operators

    def Unlearn(self, request, context):
        own = self._authorize_unlearn(request, context)
        try:
            job = self.manager.submit(self._parse_request(request, context, own))
        except RequestError as exc:
            context.abort(CODES[exc.kind], str(exc))
        return admin_pb2.JobRef(job_id=job.job_id)

    def Erase(self, request, context):
        """Stage I's erase, refused while a job is queued or running (it needs every share it
        was filed against; a job's targets are erased when it completes)."""
        require_admin(self.cfg, context)
        busy = [j.job_id for j in self.jobs.all() if j.state in ("queued", "running")]
        if busy:
            context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"unlearning job(s) {busy} are queued or running; erase after they end",
            )
        reply = super().Erase(request, context)
        self.manager.prune_failed("", any_base=True)  # the history changed: no failed job can resume
        return reply

    def GetJobStatus(self, request, context):
        require_admin(self.cfg, context)
        return self._status(self._job(request, context))

    def WatchJob(self, request, context):
        require_admin(self.cfg, context)
        last = None
        while context.is_active() and not self.state.stopping.is_set():
            status = self._status(self._job(request, context))
            view = (status.state, status.step, status.unlearning_round, status.bytes, status.error, status.attempt)
            if view != last:
                last = view
                yield status
                if status.state in (STATES[s] for s in TERMINAL):
                    return
            time.sleep(WATCH_POLL_S)

    def _finished(self, request, context) -> JobRecord:
        job = self._job(request, context)
        if job.state != "succeeded":
            context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"job {job.job_id} is {job.state}" + (f": {job.error}" if job.error else ""),
            )
        return job

    def GetJobModel(self, request, context):
        require_admin(self.cfg, context)
        job = self._finished(request, context)
        model = self.state.store.model_by_hash(job.model_hash)
        header = common_pb2.ModelHeader(
            round=job.base_round + 1,
            arch=model.arch,
            num_params=model.params.size,
            model_hash=model.hash,
            lr=self.state.store.global_model(0).lr,
            precision_bits=self.cfg.precision_bits,
        )
        yield from model_messages(header, model.params, self.cfg.limits.chunk_bytes)

    def GetJobReport(self, request, context):
        """The report of a succeeded job, or of a cancelled one (how far it went)."""
        require_admin(self.cfg, context)
        job = self._job(request, context)
        folder = self.jobs.job_dir(job.job_id)
        if job.state != "cancelled" or not (folder / "report.json").exists():
            job = self._finished(request, context)
        report = json.loads((folder / "report.json").read_text())
        return admin_pb2.JobReport(
            job_id=job.job_id,
            report_json=json.dumps(report, sort_keys=True),
            summary=(folder / "summary.txt").read_text(),
            model_hash=job.model_hash,
        )

    def GetJobCertificate(self, request, context):
        """A succeeded job's signed erasure certificate; for a cancelled job an empty one with
        status "cancelled" (it stopped before installing its model, so it erased nothing)."""
        require_admin(self.cfg, context)
        job = self._job(request, context)
        if job.state == "cancelled":
            return admin_pb2.JobCertificate(job_id=job.job_id, status="cancelled", detail=CANCELLED_NOTHING_ERASED)
        job = self._finished(request, context)
        folder = self.jobs.job_dir(job.job_id)
        path = folder / CERTIFICATE_FILE
        if path.exists():
            return admin_pb2.JobCertificate(job_id=job.job_id, certificate_json=path.read_text(), status="signed")
        status = json.loads((folder / "report.json").read_text()).get("certificate") or {}
        return admin_pb2.JobCertificate(
            job_id=job.job_id,
            status=status.get("status", "unsigned"),
            detail=status.get("detail", "this job finished before erasure certificates were signed"),
        )

    def CancelJob(self, request, context):
        """Cancel a queued or running job (server.jobs.cancellation); the job's status after."""
        require_admin(self.cfg, context)
        try:
            job = self.manager.cancel(request.job_id)
        except RequestError as exc:
            context.abort(CODES[exc.kind], str(exc))
        return self._status(job)

    def ListJobs(self, request, context):
        require_admin(self.cfg, context)
        return admin_pb2.ListJobsReply(jobs=[self._status(j) for j in self.jobs.all()])


class JobPeerService(PeerService):
    def __init__(self, state: PartyState, follower: JobFollower, attestor: Attestor):
        super().__init__(state)
        self.follower = follower
        self.attestor = attestor
        self.evaluations = FollowerEvaluations(state, follower.jobs)

    def PostEvaluation(self, request, context):
        require_peer(self.cfg, context)
        try:
            self.evaluations.post(request)
        except EvaluationRefused as exc:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        return self._ack(detail=request.job_id)

    def EvaluationHeld(self, request, context):
        require_peer(self.cfg, context)
        try:
            held = self.evaluations.held(request)
        except EvaluationRefused as exc:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        return peer_pb2.EvaluationClients(client_ids=held)

    def EvaluationStep(self, request, context):
        require_peer(self.cfg, context)
        try:
            words = self.evaluations.step(request)
        except (EvaluationRefused, LookupError, ValueError, StoreError) as exc:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        reply = peer_pb2.EvaluationStepMessage(job_id=request.job_id, batch_id=request.batch_id, step=request.step)
        reply.words.extend(words.tolist())
        return reply

    def StartJob(self, request, context):
        require_peer(self.cfg, context)
        try:
            detail = self.follower.start_job(request)
        except RequestError as exc:
            context.abort(CODES[exc.kind], str(exc))
        return self._ack(detail=detail)

    def GetPeerJob(self, request, context):
        require_peer(self.cfg, context)
        job = self.follower.jobs.get(request.job_id)
        if job is None:
            return peer_pb2.PeerJobState(job_id=request.job_id, state="unknown")
        return peer_pb2.PeerJobState(
            job_id=job.job_id,
            state=job.state,
            unlearning_round=job.unlearning_round,
            checkpoint_hash=job.model_hash,
            error=job.error,
            checkpoint_round=held_checkpoint(self.follower.jobs.job_dir(job.job_id), job.checkpoint_round),
            worker_exited=job.worker_exit is not None,
            worker_exit_code=job.worker_exit or 0,
        )

    def CancelJob(self, request, context):
        require_peer(self.cfg, context)
        self.follower.cancel(request.job_id, keep_checkpoints=request.keep_checkpoints, by_admin=request.by_admin)
        return self._ack(detail=request.job_id)

    def SignCertificate(self, request, context):
        """Check party0's statement against this party's own records; sign it or say why not."""
        require_peer(self.cfg, context)
        try:
            statement = bounded_json(request.statement_json, "the statement", MAX_STATEMENT_BYTES, MAX_STATEMENT_DEPTH)
        except RequestError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        if not isinstance(statement, dict):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the statement must be a JSON object")
        try:
            entry = self.attestor.sign(request.job_id, statement)
        except NoSigningKey as exc:
            log.error("job %s: erasure certificate not signed: %s", request.job_id, exc)
            context.abort(grpc.StatusCode.UNIMPLEMENTED, str(exc))
        except (ViewError, AttestationRefused) as exc:
            log.error("job %s: erasure certificate not signed: %s", request.job_id, exc)
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"party{self.cfg.role} will not sign: {exc}")
        log.info("job %s: erasure certificate checked and signed", request.job_id)
        return peer_pb2.CertificateSignature(**entry)
