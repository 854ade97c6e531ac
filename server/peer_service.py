"""Peer gRPC service: the follower (party1) side of the Stage I round protocol.

Each handler is idempotent so that the leader may retry any step after a crash
(docs/SERVICE.md, "Round protocol"): open round i from M_{i−1} (hash checked) → close
and report the upload set → fix the agreed membership S → exchange aggregate shares
(each party derives M_i) → commit only when the leader's hash of M_i equals ours, else
fail the round. party1 applies its own minimum cohort k to the membership and to the
exchange (server.cohort), whatever party0 asks. The job-control calls are answered on party1 by
`server.jobs.services.JobPeerService`; elsewhere the generated base answers UNIMPLEMENTED.
"""

from __future__ import annotations

import logging
import math
from urllib.parse import urlsplit

import grpc

from mpc.fixedpoint import to_wire
from mpc.plane.rendezvous import check_session_id
from proto.starfish.v1 import common_pb2, peer_pb2, peer_pb2_grpc
from proto.wire import StreamError, collect_model, read_share_stream, sha256_hex, share_messages
from server import cohort, membership, metrics, storage_faults, upload_check_peer
from server.aggregation import fedavg_update, local_aggregate
from server.auth import require_peer
from server.config import PartyConfig
from server.party_state import PartyState
from server.stage1_clip import ClipFailed
from server.storage_faults import StorageFault, headroom_ok
from server.store import ConflictError, StoreError, membership_digest

log = logging.getLogger(__name__)
DP_NO_EXCHANGE = (
    "[privacy] dp = true: this party opens Stage I aggregates only clipped and noised in 2PC (ClipRound), "
    "never its share of the unclipped sum"
)


def clip_rendezvous(cfg: PartyConfig, request: peer_pb2.ClipRoundRequest) -> tuple[str, int]:
    """Where party0's clip worker listens; the session id and the dealer checked (ValueError)."""
    url = urlsplit(request.rendezvous)
    if url.scheme != "tls" or not url.hostname or not url.port:
        raise ValueError(f"rendezvous must be tls://host:port, got {request.rendezvous!r}")
    check_session_id(request.session_id)
    if request.dealer_identity != cfg.jobs.dealer_identity:
        raise ValueError(
            f"party0 uses dealer {request.dealer_identity!r}, this party trusts {cfg.jobs.dealer_identity!r}"
        )
    return url.hostname, url.port


def member_list(state: PartyState, round_index: int) -> peer_pb2.MemberList:
    ups = state.store.uploads(round_index)
    return peer_pb2.MemberList(
        round=round_index,
        members=[
            common_pb2.Member(
                client_id=c, n_samples=u.n_samples, content_sha256=u.grad_sha256, binding_sha256=u.binding_sha256
            )
            for c, u in sorted(ups.items())
        ],
    )


def receipt_message(r) -> common_pb2.EraseReceipt:
    return common_pb2.EraseReceipt(
        party=r.party,
        client_id=r.client,
        rounds=r.rounds,
        files_deleted=r.files_deleted,
        bytes_deleted=r.bytes_deleted,
        rows_deleted=r.rows_deleted,
        erased_at=r.erased_at,
        content_sha256=r.content_sha256,
    )


class PeerService(peer_pb2_grpc.PeerServiceServicer):
    def __init__(self, state: PartyState):
        self.state = state
        self.cfg = state.config

    def _ack(self, model_hash: str = "", detail: str = "") -> peer_pb2.PeerAck:
        return peer_pb2.PeerAck(party=self.cfg.role, model_hash=model_hash, detail=detail)

    def _record(self, round_index: int, context):
        rec = self.state.store.round_record(round_index)
        if rec is None:
            context.abort(
                grpc.StatusCode.FAILED_PRECONDITION, f"round {round_index} was never opened on party{self.cfg.role}"
            )
        if rec.state == "failed":
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"round {round_index} failed: {rec.error}")
        return rec

    def _require_cohort(self, round_index: int, members: int, context) -> None:
        """This party's own minimum cohort k (server.cohort): no membership of fewer than k
        principals is fixed here, and no aggregate share of one leaves this party."""
        refusal = cohort.refusal(self.cfg.role, round_index, members, self.cfg.privacy.min_cohort)
        if refusal is not None:
            metrics.round_below_cohort(cohort.REFUSED)
            log.error(refusal)
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, refusal)

    def InitModel(self, request_iterator, context):
        require_peer(self.cfg, context)
        try:
            header, params = collect_model(request_iterator, self.cfg.limits.max_model_params)
            digest = self.state.store.install_initial_model(header.arch, params, header.lr)
        except (ValueError, ConflictError) as exc:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"initial model refused: {exc}")
        return self._ack(digest)

    def OpenRound(self, request, context):
        require_peer(self.cfg, context)
        if not (math.isfinite(request.deadline_unix) and math.isfinite(request.lr) and request.lr > 0):
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"round {request.round}: deadline {request.deadline_unix!r} and lr {request.lr!r} "
                "must be finite, lr > 0",
            )
        if self.state.store.round_record(request.round) is None and not headroom_ok(
            self.cfg.data_dir, self.cfg.limits.min_free_bytes
        ):
            reason = f"the data dir has less than [limits] min_free_bytes = {self.cfg.limits.min_free_bytes} free"
            storage_faults.abort(context, StorageFault(reason, full=True), self.cfg.role, "OpenRound")
        try:
            rec = self.state.store.open_round(request.round, request.model_hash, request.deadline_unix, request.lr)
        except StoreError as exc:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        return self._ack(rec.model_in_hash)

    def ListUploads(self, request, context):
        require_peer(self.cfg, context)
        self._record(request.round, context)
        return member_list(self.state, request.round)

    def CloseRound(self, request, context):
        require_peer(self.cfg, context)
        rec = self._record(request.round, context)
        if rec.state == "open":
            self.state.store.set_round_state(request.round, "closed")
        return member_list(self.state, request.round)

    def AbandonRound(self, request, context):
        """party0 abandoned an open round (an unlearning job paused training): record it."""
        require_peer(self.cfg, context)
        rec = self._record(request.round, context)
        if rec.state in ("open", "closed", "abandoned"):
            self.state.store.set_round_state(request.round, "abandoned", request.reason)
            log.warning("round %d abandoned: %s", request.round, request.reason)
            return self._ack(detail="abandoned")
        context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"round {request.round} is {rec.state}")

    def AgreeMembership(self, request, context):
        require_peer(self.cfg, context)
        first_time = self._record(request.round, context).membership_sha256 is None
        members = {m.client_id: int(m.n_samples) for m in request.members}
        if membership_digest(members, request.round) != request.membership_sha256:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "membership digest does not match its member list")
        mine = {
            c: membership.Held(u.n_samples, u.binding_sha256)
            for c, u in self.state.store.uploads(request.round).items()
        }
        for m in request.members:
            refusal = membership.follower_refusal(
                m.client_id, int(m.n_samples), m.binding_sha256, mine.get(m.client_id)
            )
            if refusal is not None:
                log.error("round %d: membership refused: party%d %s", request.round, self.cfg.role, refusal)
                context.abort(
                    grpc.StatusCode.FAILED_PRECONDITION, f"round {request.round}: party{self.cfg.role} {refusal}"
                )
        enrolled = cohort.enrolled(members, self.cfg.principals)
        self._require_cohort(request.round, cohort.size(members, enrolled), context)
        unchecked = self._unchecked(request.round, members)
        if unchecked:
            message = f"round {request.round}: party{self.cfg.role} did not see {', '.join(unchecked)} pass validation"
            log.error("membership refused: %s", message)
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, message)
        proposed = {m.client_id: (m.principal, int(m.weight)) for m in request.members}
        weights, principals, refusal = cohort.weights_refusal(
            self.cfg.role, request.round, members, proposed, self.cfg.principals, self.cfg.privacy.min_cohort
        )
        if refusal is not None:
            log.error(refusal)
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, refusal)
        excluded = {e.client_id: e.reason for e in request.excluded}
        try:
            digest = self.state.store.set_membership(request.round, members, excluded, weights, principals)
        except StoreError as exc:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        if first_time:
            for client, reason in excluded.items():
                log.warning("round %d: upload of %s excluded: %s", request.round, client, reason)
            log.info("round %d: membership of %d clients agreed", request.round, len(members))
        return self._ack(detail=digest)

    def _unchecked(self, round_index: int, members: dict[str, int]) -> list[str]:
        """Members this party did not see pass its own input validation (none when it is off)."""
        if not self.cfg.validation.enabled:
            return []
        seen = self.state.verdicts.read(f"round-{round_index}")
        return sorted(c for c in members if seen.get(c) != [])

    def StartCheck(self, request, context):
        """Input validation: start a batch party0 leads (server.upload_check_peer)."""
        require_peer(self.cfg, context)
        try:
            upload_check_peer.start(self.state, request)
        except upload_check_peer.CheckRefused as exc:
            log.warning("check batch %s refused: %s", request.batch_id, exc)
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        except RuntimeError as exc:
            context.abort(grpc.StatusCode.ABORTED, str(exc))
        return self._ack(detail=request.batch_id)

    def CheckStep(self, request_iterator, context):
        """One step of one client's check: party0's vector in, this party's out."""
        require_peer(self.cfg, context)
        try:
            yield from upload_check_peer.step(self.state, request_iterator)
        except (StreamError, KeyError, RuntimeError, TimeoutError) as exc:
            context.abort(grpc.StatusCode.ABORTED, str(exc))

    def FinishCheck(self, request, context):
        """End a batch: this party's verdicts, recorded durably before the answer."""
        require_peer(self.cfg, context)
        try:
            return upload_check_peer.finish(self.state, request)
        except (KeyError, RuntimeError) as exc:
            context.abort(grpc.StatusCode.ABORTED, str(exc))

    def ExchangeAggregate(self, request_iterator, context):
        require_peer(self.cfg, context)
        if self.state.stage1_clip is not None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, DP_NO_EXCHANGE)
        store = self.state.store
        try:
            header, leader_share = read_share_stream(request_iterator, self.cfg.limits.max_model_params)
        except ValueError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        rec = self._record(header.round, context)
        if rec.membership_sha256 is None or rec.membership_sha256 != header.membership_sha256:
            context.abort(
                grpc.StatusCode.FAILED_PRECONDITION, f"round {header.round}: aggregate is over another membership"
            )
        previous = store.model_by_hash(rec.model_in_hash)
        if leader_share.size != previous.params.size:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "aggregate share length differs from the model size")
        members, weights = store.round_members(header.round), store.round_weights(header.round)
        self._require_cohort(header.round, cohort.size(members, store.round_principals(header.round)), context)
        mine = local_aggregate(store, header.round, members, previous.params.size, self.state.running_sums, weights)
        new_params = fedavg_update(
            previous.params, leader_share, mine, sum(weights.values()), rec.lr, self.cfg.precision_bits
        )
        digest = store.set_round_output(header.round, previous.arch, new_params, peer_bytes=2 * 8 * mine.size)
        log.info("round %d: aggregate exchanged, candidate model %s", header.round, digest[:12])
        data = to_wire(mine)
        out = common_pb2.ShareHeader(
            round=header.round,
            shape=[mine.size],
            dtype="int64",
            membership_sha256=rec.membership_sha256,
            content_sha256=sha256_hex(data),
        )
        yield from share_messages(out, data, self.cfg.limits.chunk_bytes)

    def ClipRound(self, request, context):
        """With DP: join party0's clip session of the round (server.stage1_clip); the candidate
        M_i's hash once this party's worker opened G_i. A failed session aborts with ABORTED
        (party0 retries with a new session)."""
        require_peer(self.cfg, context)
        clipper = self.state.stage1_clip
        if clipper is None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"party{self.cfg.role} has [privacy] dp = false")
        rec = self._record(request.round, context)
        if rec.membership_sha256 is None or rec.membership_sha256 != request.membership_sha256:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"round {request.round}: clip over another membership")
        if rec.state == "committed":  # a repeated call after the commit: nothing to open again
            return self._ack(rec.model_out_hash)
        store = self.state.store
        size = cohort.size(store.round_members(request.round), store.round_principals(request.round))
        self._require_cohort(request.round, size, context)
        try:
            host, port = clip_rendezvous(self.cfg, request)
        except ValueError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        try:
            digest = clipper.follow(request.round, request.membership_sha256, request.session_id, host, port)
        except (ClipFailed, OSError, ValueError) as exc:
            log.warning("round %d: clip session %s failed: %s", request.round, request.session_id, exc)
            context.abort(grpc.StatusCode.ABORTED, str(exc))
        log.info("round %d: clipped aggregate opened, candidate model %s", request.round, digest[:12])
        return self._ack(digest)

    def CommitRound(self, request, context):
        require_peer(self.cfg, context)
        store = self.state.store
        rec = self._record(request.round, context)
        if rec.model_out_hash is None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"round {request.round} has no aggregated model yet")
        if rec.state == "committed" and rec.model_out_hash != request.model_hash:
            context.abort(  # a committed round is final: a late or wrong claim changes nothing
                grpc.StatusCode.FAILED_PRECONDITION,
                f"round {request.round} is committed with model {rec.model_out_hash[:16]}, "
                f"not {request.model_hash[:16] or '(empty)'}",
            )
        if rec.model_out_hash != request.model_hash:
            error = (
                f"model hash mismatch in round {request.round}: party{self.cfg.role} computed "
                f"{rec.model_out_hash[:16]}, party{1 - self.cfg.role} computed {request.model_hash[:16]}; "
                "training stopped"
            )
            store.set_round_state(request.round, "failed", error)
            metrics.round_failed()
            log.error(error)
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, error)
        if rec.state != "committed":
            try:
                store.commit_round(request.round)
            except ConflictError as exc:  # the round's model cannot join this party's chain
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"round {request.round}: {exc}")
            metrics.round_committed(request.round, len(store.round_members(request.round)))
        log.info("round %d committed, model %s", request.round, rec.model_out_hash[:12])
        return self._ack(rec.model_out_hash)

    def EraseClient(self, request, context):
        require_peer(self.cfg, context)
        first = not self.state.store.is_erased(request.client_id)
        receipt = self.state.store.erase_client(request.client_id)
        if first:
            metrics.client_erased()
        return receipt_message(receipt)

    # -- job RPCs: party1 follows jobs (server.jobs.services.JobPeerService overrides these) ---
    def _not_a_follower(self, context, method: str) -> None:
        require_peer(self.cfg, context)
        context.abort(
            grpc.StatusCode.UNIMPLEMENTED,
            f"{method} is served by party1, which follows jobs; this is party{self.cfg.role}",
        )

    def StartJob(self, request, context):
        self._not_a_follower(context, "StartJob")

    def GetPeerJob(self, request, context):
        self._not_a_follower(context, "GetPeerJob")

    def CancelJob(self, request, context):
        self._not_a_follower(context, "CancelJob")

    def SignCertificate(self, request, context):
        self._not_a_follower(context, "SignCertificate")

    def PostEvaluation(self, request, context):
        self._not_a_follower(context, "PostEvaluation")

    def EvaluationHeld(self, request, context):
        self._not_a_follower(context, "EvaluationHeld")

    def EvaluationStep(self, request, context):
        self._not_a_follower(context, "EvaluationStep")
