"""Admin gRPC service (party0): start training, training status, erase, and the round
control an external FL server uses (`server.round_control`).

The unlearning-job RPCs of the contract are served by `server.jobs.services.JobAdminService`,
which extends this class.
"""

from __future__ import annotations

import logging
import math

import grpc
import numpy as np

from proto.starfish.v1 import admin_pb2, admin_pb2_grpc, common_pb2, peer_pb2
from proto.wire import collect_model
from server import metrics
from server.auth import require_admin
from server.client_service import round_state
from server.party_state import PartyState
from server.peer_client import PeerClient, PeerRefused
from server.peer_service import receipt_message
from server.round_control import close_round, global_model_messages, open_round, open_tasks
from server.store import ConflictError
from server.upload_check import bounds_refusal, check_bounds

log = logging.getLogger(__name__)


def training_status(state: PartyState) -> admin_pb2.TrainingStatus:
    store = state.store
    rs = round_state(state)
    msg = admin_pb2.TrainingStatus(
        phase=rs.phase,
        latest_committed=rs.latest_committed,
        latest_model_hash=store.global_model_hash(max(store.latest_committed(), 0)) or "",
        registered=store.registered(),
        error=rs.error,
        max_rounds=state.config.rounds.max_rounds,
        opening=state.config.rounds.opening,
        min_cohort=state.config.privacy.min_cohort,
    )
    if rs.phase in (common_pb2.ROUND_PHASE_OPEN, common_pb2.ROUND_PHASE_CLOSING):
        msg.open_round = rs.round
    committed = store.commit_times()
    for rec in store.all_round_records():
        members = store.round_members(rec.round)
        msg.rounds.append(
            admin_pb2.RoundSummary(
                round=rec.round,
                state=rec.state,
                model_hash=rec.model_out_hash or "",
                opened_unix=rec.opened,
                committed_unix=committed.get(rec.round, 0.0) if rec.state == "committed" else 0.0,
                peer_bytes=rec.peer_bytes,
                error=rec.error,
                members=[common_pb2.Member(client_id=c, n_samples=n) for c, n in members.items()],
                excluded=[common_pb2.Exclusion(client_id=c, reason=r) for c, r in store.exclusions(rec.round).items()],
            )
        )
    return msg


def initial_model_refusal(header, params: np.ndarray, max_lr: float) -> str | None:
    """Why StartTraining must refuse M_0 and η_l (INVALID_ARGUMENT), or None."""
    if not (math.isfinite(header.lr) and 0 < header.lr <= max_lr):
        return f"learning rate must be a finite number in (0, {max_lr:g}] (limits.max_lr), got {header.lr!r}"
    bad = int(params.size - np.count_nonzero(np.isfinite(params)))
    if bad:
        return f"initial model has {bad} non-finite parameter(s) (NaN or inf)"
    if not header.arch or len(header.arch) > 128:
        return "architecture name must be 1 to 128 characters"
    return None


class AdminService(admin_pb2_grpc.AdminServiceServicer):
    def __init__(self, state: PartyState, peer: PeerClient):
        self.state = state
        self.cfg = state.config
        self.peer = peer

    def StartTraining(self, request_iterator, context):
        require_admin(self.cfg, context)
        try:
            header, params = collect_model(request_iterator, self.cfg.limits.max_model_params)
        except ValueError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"initial model refused: {exc}")
        refusal = initial_model_refusal(header, params, self.cfg.limits.max_lr) or bounds_refusal(self.cfg, params.size)
        if refusal is not None:
            log.warning("StartTraining refused: %s", refusal)
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"initial model refused: {refusal}")
        try:
            digest = self.state.store.install_initial_model(header.arch, params, header.lr)
        except ConflictError as exc:
            context.abort(grpc.StatusCode.ALREADY_EXISTS, str(exc))
        log.info("initial model %s installed (%s, %d parameters)", digest[:12], header.arch, params.size)
        if self.cfg.validation.enabled:
            bound = check_bounds(self.cfg, params.size).max_norm
            log.info("input validation: every upload and task answer must have ‖g‖ ≤ %.6g ([validation])", bound)
        return training_status(self.state)

    def GetTrainingStatus(self, request, context):
        require_admin(self.cfg, context)
        return training_status(self.state)

    def Erase(self, request, context):
        require_admin(self.cfg, context)
        client = request.client_id
        if client not in self.cfg.clients:
            context.abort(grpc.StatusCode.NOT_FOUND, f"unknown client {client!r}")
        try:
            theirs = self.peer.unary("EraseClient", peer_pb2.EraseClientRequest(client_id=client))
        except PeerRefused as exc:
            context.abort(grpc.StatusCode.UNAVAILABLE, f"party1 did not erase {client!r}: {exc}")
        mine = receipt_message(self.state.store.erase_client(client))
        metrics.client_erased()
        log.info("client %s erased on both parties", client)
        return admin_pb2.EraseReply(receipts=[mine, theirs])

    # -- round control for an external FL server (server.round_control) ---------------------
    def OpenRound(self, request, context):
        require_admin(self.cfg, context)
        return open_round(self.state, request, context)

    def CloseRound(self, request, context):
        require_admin(self.cfg, context)
        return close_round(self.state, request, context)

    def GetGlobalModel(self, request, context):
        require_admin(self.cfg, context)
        return global_model_messages(self.state, request, context)

    def ListTasks(self, request, context):
        require_admin(self.cfg, context)
        return open_tasks(self.state, request)
