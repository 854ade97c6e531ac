"""Client-facing gRPC service (both parties): register, round state, models, uploads, upload
status, tasks. Every refusal of an upload goes through `ClientService._refuse`, which logs the
client, the target and the reason (never share bytes) before aborting the call."""

from __future__ import annotations

import logging
import time

import grpc
import numpy as np

from mpc.eval_counts import answer_words
from mpc.masks import expand_mask
from proto.starfish.v1 import client_pb2, client_pb2_grpc, common_pb2
from proto.wire import model_messages
from server import metrics
from server.auth import authenticate_client
from server.headroom import round_sample_budget
from server.party_state import PartyState
from server.store import ConflictError, RoundClosedError, SampleBudgetError, ShareBundle, StoreError
from server.upload_status import upload_status
from server.uploads import UploadError, check_binding, read_body, read_header

log = logging.getLogger(__name__)

PHASES = {
    "open": common_pb2.ROUND_PHASE_OPEN,
    "closed": common_pb2.ROUND_PHASE_CLOSING,
    "agreed": common_pb2.ROUND_PHASE_CLOSING,
    "aggregated": common_pb2.ROUND_PHASE_CLOSING,
    "failed": common_pb2.ROUND_PHASE_HALTED,
}
TASK_POLL_S = 1.0  #: upper bound on how long WatchTasks sleeps between store checks


def round_state(state: PartyState) -> client_pb2.RoundState:
    """Where training stands on this party (the reply of GetRound)."""
    cfg, store = state.config, state.store
    latest = store.latest_committed()
    msg = client_pb2.RoundState(
        party=cfg.role, latest_committed=max(latest, 0), precision_bits=cfg.precision_bits, max_abs=cfg.max_abs
    )
    if latest < 0:
        msg.phase = common_pb2.ROUND_PHASE_NOT_STARTED
        return msg
    rec = store.current_round()
    if rec is None:
        msg.phase = common_pb2.ROUND_PHASE_IDLE
        msg.round = latest
        msg.model_hash = store.global_model_hash(latest) or ""
        return msg
    msg.phase = PHASES[rec.state]
    msg.round = rec.round
    msg.model_hash = rec.model_in_hash
    msg.deadline_unix = rec.deadline
    msg.lr = rec.lr
    msg.error = rec.error if rec.state == "failed" else ""  # an open round's note is not an error (round summary)
    msg.uploaded.extend(sorted(store.uploads(rec.round)))
    return msg


class ClientService(client_pb2_grpc.ClientServiceServicer):
    def __init__(self, state: PartyState):
        self.state = state
        self.cfg = state.config

    def Register(self, request, context):
        client = authenticate_client(self.cfg, context)
        if self.state.store.is_erased(client):
            context.abort(grpc.StatusCode.PERMISSION_DENIED, f"client {client!r} was erased and cannot rejoin")
        self.state.store.register(client)
        log.info("client %s registered", client)
        return client_pb2.RegisterReply(
            client_id=client, party=self.cfg.role, precision_bits=self.cfg.precision_bits, max_abs=self.cfg.max_abs
        )

    def GetRound(self, request, context):
        authenticate_client(self.cfg, context)
        return round_state(self.state)

    def GetModel(self, request, context):
        authenticate_client(self.cfg, context)
        store = self.state.store
        index = store.latest_committed() if request.latest else request.round
        try:  # the header from the database; the parameters (cached, hash-checked) only when sent
            arch, num_params, digest, lr = store.global_model_header(index)
            params = None if request.header_only else store.model_by_hash(digest).params
        except StoreError as exc:
            context.abort(grpc.StatusCode.NOT_FOUND, str(exc))
        header = common_pb2.ModelHeader(
            round=index,
            arch=arch,
            num_params=num_params,
            model_hash=digest,
            lr=lr,
            precision_bits=self.cfg.precision_bits,
        )
        if params is None:
            yield common_pb2.ModelChunk(header=header)
            return
        yield from model_messages(header, params, self.cfg.limits.chunk_bytes)

    def _refuse(self, context, code: grpc.StatusCode, client: str, what: str, reason: str, label: str):
        """Log, count and abort: the one place where an upload is refused (client, target, reason;
        `label` is the reason's short code in `starfish_uploads_refused_total`)."""
        log.warning("party%d refused the upload of %s for %s (%s): %s", self.cfg.role, client, what, code.name, reason)
        metrics.upload_refused(what.split(" ")[0] if what.startswith(("round", "task")) else "unknown", label)
        context.abort(code, reason)

    def UploadShares(self, request_iterator, context):
        try:
            client = authenticate_client(self.cfg, context)
        except Exception:  # context.abort raised: count it, let gRPC answer
            metrics.upload_refused("unknown", "unauthenticated")
            raise
        what = "an unnamed target"
        try:
            header, rest = read_header(request_iterator)
            target = header.WhichOneof("target")
            if target == "round":
                what = f"round {header.round}"
                return self._round_upload(client, header, rest, context)
            if target == "task_id":
                what = f"task {header.task_id}"
                return self._task_upload(client, header, rest, context)
            raise UploadError("upload header names neither a round nor a task")
        except UploadError as exc:
            self._refuse(context, grpc.StatusCode.INVALID_ARGUMENT, client, what, str(exc), "invalid")
        except ConflictError as exc:
            self._refuse(context, grpc.StatusCode.ALREADY_EXISTS, client, what, str(exc), "conflict")
        except RoundClosedError as exc:
            self._refuse(context, grpc.StatusCode.FAILED_PRECONDITION, client, what, str(exc), "round_closed")
        except SampleBudgetError as exc:
            self._refuse(context, grpc.StatusCode.FAILED_PRECONDITION, client, what, str(exc), "over_budget")

    def _round_upload(self, client: str, header, rest, context):
        store = self.state.store
        what = f"round {header.round}"
        if store.is_erased(client):
            reason = f"client {client!r} was erased"
            self._refuse(context, grpc.StatusCode.PERMISSION_DENIED, client, what, reason, "erased")
        if not store.is_registered(client):
            reason = f"client {client!r} is not registered on party{self.cfg.role}; call Register first"
            self._refuse(context, grpc.StatusCode.FAILED_PRECONDITION, client, what, reason, "not_registered")
        rec = store.round_record(header.round)
        # a half already held is answered (duplicate or conflict) whatever the round's state
        if rec is None or (rec.state != "open" and store.upload(header.round, client) is None):
            current = store.current_round()
            open_now = current.round if current is not None and current.state == "open" else None
            reason = f"round {header.round} is not open for uploads (open round: {open_now or 'none'})"
            self._refuse(context, grpc.StatusCode.FAILED_PRECONDITION, client, what, reason, "round_closed")
        if header.model_hash != rec.model_in_hash:
            reason = (
                f"gradient was computed at model {header.model_hash[:12] or '?'}…, round {header.round} "
                f"starts from {rec.model_in_hash[:12]}…"
            )
            self._refuse(context, grpc.StatusCode.FAILED_PRECONDITION, client, what, reason, "wrong_model")
        num_params = store.model_size(rec.model_in_hash)
        parsed = read_body(header, rest, num_params, self.cfg.limits)
        digest, duplicate = store.put_upload(
            header.round,
            client,
            header.n_samples,
            parsed.gradient,
            parsed.norm,
            parsed.delta,
            rec.model_in_hash,
            parsed.mask_seed,
            num_params,
            binding_sha256=check_binding(header, self.cfg.role, num_params),
            sample_budget=round_sample_budget(self.cfg.precision_bits, self.cfg.max_abs),
            verified_sha256=header.content_sha256,  # read_body checked the bytes against it
        )
        if not duplicate:
            share = parsed.gradient if parsed.mask_seed is None else expand_mask(parsed.mask_seed, num_params)
            self.state.running_sums.add(header.round, client, int(header.n_samples), share)
            if self.cfg.validation.enabled:
                bundle = ShareBundle(share, parsed.norm, parsed.delta, int(header.n_samples))
                self.state.open_shares.add(header.round, client, digest, bundle)
        metrics.upload_accepted("round", duplicate)
        log.info("stored upload of %s for round %d (duplicate=%s)", client, header.round, duplicate)
        return client_pb2.UploadAck(
            party=self.cfg.role, client_id=client, round=header.round, content_sha256=digest, duplicate=duplicate
        )

    def _task_upload(self, client: str, header, rest, context):
        store = self.state.store
        task = store.task(header.task_id)
        what = f"task {header.task_id}"
        if task is None or task.client != client:
            reason = f"no task {header.task_id!r} for client {client!r}"
            self._refuse(context, grpc.StatusCode.NOT_FOUND, client, what, reason, "unknown_task")
        if task.deadline < time.time():
            reason = f"task {task.task_id} is past its deadline"
            # FAILED_PRECONDITION, never DEADLINE_EXCEEDED (a client's own timeout, which it retries)
            self._refuse(context, grpc.StatusCode.FAILED_PRECONDITION, client, what, reason, "late")
        if header.model_hash != task.model_hash:
            reason = f"task {task.task_id} asks for model {task.model_hash[:12]}…"
            self._refuse(context, grpc.StatusCode.FAILED_PRECONDITION, client, what, reason, "wrong_model")
        num_params = store.model_size(task.model_hash)
        parsed = read_body(header, rest, num_params, self.cfg.limits)
        binding_sha256 = check_binding(header, self.cfg.role, num_params)
        digest, duplicate = store.put_task_upload(
            task.task_id,
            client,
            header.n_samples,
            parsed.gradient,
            parsed.norm,
            parsed.delta,
            parsed.mask_seed,
            num_params,
            binding_sha256,
            verified_sha256=header.content_sha256,  # read_body checked the bytes against it
        )
        metrics.upload_accepted("task", duplicate)
        log.info("stored answer of %s to task %s (duplicate=%s)", client, task.task_id, duplicate)
        self.state.notify_tasks()
        return client_pb2.UploadAck(
            party=self.cfg.role, client_id=client, task_id=task.task_id, content_sha256=digest, duplicate=duplicate
        )

    def SubmitEvaluation(self, request, context):
        """An evaluation task's answer share (server.jobs.evaluation_tasks): the words of
        mpc.eval_counts, stored durably before the acknowledgement; the same words again are a
        duplicate, other words ALREADY_EXISTS. Only its length is checked here; its content is
        checked in 2PC with the other party's share."""
        client = authenticate_client(self.cfg, context)
        task = self.state.store.task(request.task_id)
        what = f"task {request.task_id}"
        if task is None or task.client != client or task.kind != client_pb2.TASK_KIND_EVALUATE:
            reason = f"no evaluation task {request.task_id!r} for client {client!r}"
            self._refuse(context, grpc.StatusCode.NOT_FOUND, client, what, reason, "unknown_task")
        if task.deadline < time.time():
            reason = f"task {task.task_id} is past its deadline"
            self._refuse(context, grpc.StatusCode.FAILED_PRECONDITION, client, what, reason, "late")
        words = answer_words(self.cfg.evaluation.max_eval_samples)
        if len(request.words) != words:
            reason = f"an evaluation answer has {words} words (max_eval_samples {self.cfg.evaluation.max_eval_samples})"
            self._refuse(context, grpc.StatusCode.INVALID_ARGUMENT, client, what, reason, "invalid")
        zero = np.zeros(1, dtype=np.int64)
        share = np.array(request.words, dtype=np.int64)
        try:
            digest, duplicate = self.state.store.put_task_upload(task.task_id, client, 1, share, zero, zero)
        except ConflictError as exc:
            self._refuse(context, grpc.StatusCode.ALREADY_EXISTS, client, what, str(exc), "conflict")
        metrics.upload_accepted("task", duplicate)
        log.info("stored evaluation answer of %s to task %s (duplicate=%s)", client, task.task_id, duplicate)
        self.state.notify_tasks()
        return client_pb2.UploadAck(
            party=self.cfg.role, client_id=client, task_id=task.task_id, content_sha256=digest, duplicate=duplicate
        )

    def GetUploadStatus(self, request, context):
        client = authenticate_client(self.cfg, context)
        return upload_status(self.state.store, self.cfg.role, request.round, client)

    def WatchTasks(self, request, context):
        client = authenticate_client(self.cfg, context)
        sent: set[str] = set()
        while context.is_active() and not self.state.stopping.is_set():
            for task in self.state.store.open_tasks(client, time.time()):
                if task.task_id in sent:
                    continue
                sent.add(task.task_id)
                yield client_pb2.Task(
                    task_id=task.task_id,
                    job_id=task.job_id,
                    kind=task.kind,
                    unlearning_round=task.unlearning_round,
                    original_round=task.original_round,
                    model_hash=task.model_hash,
                    deadline_unix=task.deadline,
                    **self._evaluation_fields(task.kind),
                )
            with self.state.tasks_changed:
                self.state.tasks_changed.wait(TASK_POLL_S)
        if self.state.stopping.is_set():  # a graceful stop: the SDK reconnects with back-off
            context.abort(grpc.StatusCode.UNAVAILABLE, f"party{self.cfg.role} is stopping; reconnect")

    def _evaluation_fields(self, kind: int) -> dict:
        """An evaluation task also carries the operator's probe and N ([evaluation])."""
        if kind != client_pb2.TASK_KIND_EVALUATE:
            return {}
        return {"probe": self.cfg.evaluation.probe, "max_eval_samples": self.cfg.evaluation.max_eval_samples}

    def GetTaskModel(self, request, context):
        client = authenticate_client(self.cfg, context)
        task = self.state.store.task(request.task_id)
        if task is None or task.client != client:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no task {request.task_id!r} for client {client!r}")
        model = self.state.store.model_by_hash(task.model_hash)
        header = common_pb2.ModelHeader(
            arch=model.arch, num_params=model.params.size, model_hash=model.hash, precision_bits=self.cfg.precision_bits
        )
        yield from model_messages(header, model.params, self.cfg.limits.chunk_bytes)
