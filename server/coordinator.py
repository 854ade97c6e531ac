"""The leader's round coordinator (party0); docs/SERVICE.md, "Round protocol".

Rounds open one after the other (`[rounds] opening = "auto"`) or when the admin asks
(`"on_request"`: an external FL server such as a Flower strategy samples the clients of
each round). Per round i, every step idempotent on both parties so a restart of either resumes:

1. open round i from M_{i−1} here and on party1 (party1 checks the hash of M_{i−1});
2. wait until every registered client has an upload on both parties (with opening
   "on_request": until the clients the admin names in its close request have), or the
   deadline passes (with fewer than `min_clients` consistent pairs the deadline is extended).
   A round with fewer consistent pairs than the minimum cohort k never commits: with opening
   "auto" it stays open (deadline extended, with a note), with "on_request" or when an
   unlearning job ends it, it is abandoned on both parties (server.cohort);
3. close here and on party1; S = clients whose two halves both arrived with equal n_j and
   equal binding (server.membership), within the round's sample budget; every other
   upload is excluded with a reason, logged and recorded on both parties;
   3b. with `[validation]` on, every upload of S is checked in 2PC with party1
   (server.upload_check); a refused one leaves S with the check's reason. S below the
   minimum cohort then abandons the round;
4. fix S and the exclusions on both parties (membership digest and bindings compared);
5. A_0 = Σ_{j∈S} n_j·[g_j]_0 here; exchange with party1's A_1 over the peer channel;
6. M_i = M_{i−1} − η_l·decode(A_0 + A_1)/Σ n_j; party1 commits only if its hash of M_i
   equals ours; a mismatch fails the round with a clear error and training halts.

Faults: a storage fault on either party (disk full, read-only store; server.storage_faults)
leaves the step undone on that party and is retried — it never fails the round; only a refusal
by party1 (PeerRefused) does. No round opens while the data dir has less than `[limits]
min_free_bytes` free. A round whose deadline passed while party0 was down or party1
unreachable closes only `rounds.recovery_grace_s` after they are back, so that clients
retrying into it get through. A round whose model cannot join the chain (a job installed
M_i: ConflictError) fails with that error instead of committing beside it.

With `[privacy] dp = true`, steps 5–6 are a clip session instead (server.stage1_clip): the
aggregate is clipped per client and noised inside 2PC, M_i = M_{i−1} − η_l·G_i from the
opened G_i; a failed session stores no candidate and the round is retried.
"""

from __future__ import annotations

import logging
import threading
import time

from mpc.fixedpoint import to_wire
from proto.starfish.v1 import common_pb2, peer_pb2
from proto.wire import model_messages, read_share_stream, sha256_hex, share_messages
from server import cohort, membership, metrics, request_context
from server.aggregation import fedavg_update, local_aggregate
from server.headroom import round_sample_budget
from server.party_state import PartyState
from server.peer_client import PeerClient, PeerRefused, Stopped
from server.stage1_clip import ClipFailed
from server.storage_faults import classify, headroom_ok
from server.store import ConflictError, RoundRecord, membership_digest
from server.upload_check import CheckFailed, Item, LeaderBatch, check_bounds
from unlearning.weight_cap import capped_weights

log = logging.getLogger(__name__)


class RoundCoordinator:
    """Drives Stage I rounds from party0; run `run()` in a thread, stop via state.stopping."""

    def __init__(self, state: PartyState, peer: PeerClient):
        self.state = state
        self.store = state.store
        self.cfg = state.config
        self.peer = peer
        self._peer_has_m0 = False
        self._started = time.time()
        self._low_space_logged = False
        self._check_bytes: dict[int, int] = {}  #: round → bytes its upload checks exchanged with party1
        self.thread = threading.Thread(target=self.run, name="round-coordinator", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def run(self) -> None:
        stop = self.state.stopping
        while not stop.is_set():
            try:
                with request_context.scope(f"round-{self.store.latest_committed() + 1}"):
                    busy = self.step()
                if not busy:
                    stop.wait(self.cfg.rounds.poll_s)
            except Stopped:
                return
            except ClipFailed as exc:  # no candidate model was stored: the next step retries the round
                log.warning("clip session failed: %s; retrying", exc)
                stop.wait(self.cfg.rounds.peer_retry_s)
            except CheckFailed as exc:  # no membership was fixed: the next step checks again
                metrics.check_batch("failed")
                log.warning("input check failed: %s; retrying", exc)
                stop.wait(self.cfg.rounds.peer_retry_s)
            except (PeerRefused, ConflictError) as exc:
                self._fail_round(exc)
            except Exception as exc:  # keep serving clients; the next step retries
                fault = classify(exc)
                if fault is not None:  # this party cannot write now: retried, never a failed round
                    metrics.storage_fault("full" if fault.full else "unwritable")
                    log.warning("round step postponed: party0 %s; retrying", fault)
                else:
                    log.exception("round coordinator step failed")
                stop.wait(self.cfg.rounds.peer_retry_s)

    def _fail_round(self, exc: Exception) -> None:
        """party1 refused a step, or the round's model cannot join the chain: the round fails."""
        rec = self.store.current_round()
        if rec is not None and rec.state != "committed":
            error = f"round {rec.round} stopped: {exc}"
            self.store.set_round_state(rec.round, "failed", error)
            metrics.round_failed()
            log.error(error)
        else:
            log.error("peer refused: %s", exc)
            self.state.stopping.wait(self.cfg.rounds.peer_retry_s)

    def step(self) -> bool:
        """Advance training by one step; returns False when there is nothing to do now."""
        latest = self.store.latest_committed()
        if latest < 0:
            return False
        if not self._peer_has_m0:
            self._send_initial_model()
        rec = self.store.current_round()
        if rec is None:
            if self.cfg.rounds.max_rounds and latest >= self.cfg.rounds.max_rounds:
                return False
            if self.state.training_paused.is_set():
                return False
            if self.cfg.rounds.opening == "on_request" and latest + 1 not in self.state.open_requests:
                return False
            if not self._enough_space():
                return False
            self._open(latest + 1)
            return True
        if rec.state == "failed":
            return False
        if rec.state == "open":
            if rec.round not in self.state.open_on_both:  # after a restart of party0: make sure party1 knows
                self.peer.unary("OpenRound", self._open_request(rec))
                self.state.mark_open_on_both(rec.round)
            if not self._ready_to_close(rec):
                return False
            self.store.set_round_state(rec.round, "closed")
            rec = self.store.round_record(rec.round)
        self._finish(rec)
        return True

    def _enough_space(self) -> bool:
        """`[limits] min_free_bytes` free in the data dir (checked before a round opens)."""
        ok = headroom_ok(self.cfg.data_dir, self.cfg.limits.min_free_bytes)
        if not ok and not self._low_space_logged:
            log.warning("no round opens: the data dir has less than %d bytes free", self.cfg.limits.min_free_bytes)
        self._low_space_logged = not ok
        return ok

    def _effective_deadline(self, rec: RoundRecord) -> float:
        """The round's deadline, or — when it passed while party0 was down or party1 unreachable —
        `rounds.recovery_grace_s` after both are back (clients still retrying get through)."""
        back = max(self._started, self.peer.recovered_at)
        if rec.deadline < back:
            return back + self.cfg.rounds.recovery_grace_s
        return rec.deadline

    # -- steps ---------------------------------------------------------------------------
    def _send_initial_model(self) -> None:
        m0 = self.store.global_model(0)
        header = common_pb2.ModelHeader(round=0, arch=m0.arch, num_params=m0.params.size, model_hash=m0.hash, lr=m0.lr)
        ack = self.peer.stream_unary(
            "InitModel", lambda: model_messages(header, m0.params, self.cfg.limits.chunk_bytes)
        )
        if ack.model_hash != m0.hash:
            raise PeerRefused(None, f"party1 holds initial model {ack.model_hash[:12]}, party0 {m0.hash[:12]}")
        self._peer_has_m0 = True

    def _open_request(self, rec: RoundRecord) -> peer_pb2.OpenRoundRequest:
        return peer_pb2.OpenRoundRequest(
            round=rec.round, model_hash=rec.model_in_hash, deadline_unix=rec.deadline, lr=rec.lr
        )

    def _open(self, round_index: int) -> None:
        previous = self.store.global_model(round_index - 1)
        lr = self.store.global_model(0).lr
        rec = self.store.open_round(round_index, previous.hash, time.time() + self.cfg.rounds.deadline_s, lr)
        self.peer.unary("OpenRound", self._open_request(rec))
        self.state.mark_open_on_both(round_index)
        log.info("round %d opened from model %s", round_index, previous.hash[:12])

    def _holdings(self, round_index: int, follower: peer_pb2.MemberList) -> tuple[dict, dict]:
        """What each party holds of every upload of the round (n_j and binding)."""
        mine = {c: membership.Held(u.n_samples, u.binding_sha256) for c, u in self.store.uploads(round_index).items()}
        theirs = {m.client_id: membership.Held(int(m.n_samples), m.binding_sha256) for m in follower.members}
        return mine, theirs

    def _decide(self, round_index: int, follower: peer_pb2.MemberList) -> tuple[dict[str, int], dict[str, str]]:
        """S and the exclusions from what each party holds (server.membership)."""
        budget = round_sample_budget(self.cfg.precision_bits, self.cfg.max_abs)
        return membership.decide(*self._holdings(round_index, follower), budget)

    def _record_exclusions(self, round_index: int, follower: peer_pb2.MemberList, excluded: dict[str, str]) -> None:
        """Log every exclusion; count and log a share-pair mismatch by its code (server.metrics)."""
        mine, theirs = self._holdings(round_index, follower)
        for client, reason in excluded.items():
            found = membership.exclusion(mine.get(client), theirs.get(client))
            if found is None:  # a consistent pair left out by the sample budget
                log.warning("round %d: upload of %s excluded: %s", round_index, client, reason)
            else:
                metrics.share_pair_mismatch(round_index, client, *found)

    def _validate(
        self, round_index: int, members: dict[str, int], excluded: dict[str, str]
    ) -> tuple[dict[str, int], dict[str, str]]:
        """Step 3b: the candidates' uploads checked in 2PC with party1 (server.upload_check);
        a refused upload joins the exclusions with its reason."""
        if not self.cfg.validation.enabled or not members:
            return members, excluded
        bounds = check_bounds(self.cfg, self.store.global_model(0).params.size)
        items = [Item(c) for c in sorted(members)]
        batch = LeaderBatch(self.cfg, self.store, self.peer, round_index, items, shares=self.state.open_shares)
        verdicts = batch.run(bounds)
        self._check_bytes[round_index] = self._check_bytes.get(round_index, 0) + batch.peer_bytes
        metrics.check_batch("completed")
        refused = {item.client_id: v for item, v in verdicts.items() if not v.accepted}
        for verdict in refused.values():  # logged with the other exclusions (_record_exclusions)
            metrics.input_refused("round", verdict.failed)
        kept = {c: n for c, n in members.items() if c not in refused}
        return kept, excluded | {c: v.reason() for c, v in refused.items()}

    def _ready_to_close(self, rec: RoundRecord) -> bool:
        wanted = self.store.close_request(rec.round)
        close_now = wanted == set()  # the admin asked to close with the uploads there are
        if wanted is not None:
            expected = wanted
        elif self.cfg.rounds.opening == "on_request":  # the admin names who is expected
            expected = set()
        else:
            expected = set(self.store.registered())
        mine = set(self.store.uploads(rec.round))
        ending = self.state.end_open_round.is_set()
        deadline_passed = ending or time.time() >= self._effective_deadline(rec)
        if not deadline_passed and not ((close_now and mine) or (expected and expected <= mine)):
            return False
        follower = self.peer.unary("ListUploads", peer_pb2.RoundRef(round=rec.round))
        members, _ = self._decide(rec.round, follower)
        # the admin's close condition holds, or every expected client's two halves arrived
        theirs = {m.client_id for m in follower.members}
        asked = bool((close_now and members) or (expected and expected <= mine & theirs))
        k = self.cfg.privacy.min_cohort
        principals = cohort.size(members, cohort.enrolled(members, self.cfg.principals))
        if asked and principals >= k:
            return True
        on_request_close = asked and self.cfg.rounds.opening == "on_request"
        if not (deadline_passed or on_request_close):
            return False
        if principals >= k and len(members) >= self.cfg.rounds.min_clients:
            return True
        self._below_minimum(rec, len(members) if principals >= k else principals, ending)
        return False

    def _below_minimum(self, rec: RoundRecord, consistent: int, ending: bool) -> None:
        """The round would close with fewer members than k (or rounds.min_clients): abandon it,
        or keep it open with an extended deadline (server.cohort)."""
        k = self.cfg.privacy.min_cohort
        below_k = consistent < k
        if ending or (below_k and cohort.must_abandon(self.cfg.rounds.opening, ending)):
            self._abandon(rec.round, consistent, ending)
            return
        if consistent == 0:  # an idle deployment: nothing to warn about (server.cohort)
            self.store.extend_deadline(rec.round, time.time() + self.cfg.rounds.deadline_s, cohort.idle_note(rec.round))
            log.debug(cohort.idle_note(rec.round))
            return
        note = cohort.wait_note(rec.round, consistent, k) if below_k else ""
        self.store.extend_deadline(rec.round, time.time() + self.cfg.rounds.deadline_s, note)
        if below_k:
            metrics.round_below_cohort(cohort.WAIT)
            log.warning(note)
        else:
            log.warning("round %d: only %d consistent uploads at the deadline; extended", rec.round, consistent)

    def _abandon(self, round_index: int, consistent: int, paused: bool) -> None:
        """End an open round without a model (an unlearning job paused training, or too few
        uploads for the minimum cohort): both parties record it; the uploads stay stored."""
        k = max(self.cfg.privacy.min_cohort, self.cfg.rounds.min_clients)
        reason = cohort.abandon_reason(round_index, consistent, k, paused)
        self.peer.unary("AbandonRound", peer_pb2.AbandonRequest(round=round_index, reason=reason))
        self.store.set_round_state(round_index, "abandoned", reason)
        self._record_check_bytes(round_index)
        self.state.mark_ended(round_index)
        if consistent == 0:  # nobody uploaded: ended, not a round below its cohort
            log.info(reason)
            return
        metrics.round_below_cohort(cohort.ABANDON)
        log.warning(reason)

    def _record_check_bytes(self, round_index: int) -> None:
        """Add the round's upload-check traffic to its stored peer_bytes (beside the aggregate's),
        whether it commits or is abandoned, and forget it here."""
        if round_index in self._check_bytes:
            self.store.add_peer_bytes(round_index, self._check_bytes.pop(round_index))

    def _finish(self, rec: RoundRecord) -> None:
        i = rec.round
        follower = self.peer.unary("CloseRound", peer_pb2.RoundRef(round=i))
        k = self.cfg.privacy.min_cohort
        if rec.membership_sha256 is None:
            members, excluded = self._validate(i, *self._decide(i, follower))
            principals = cohort.enrolled(members, self.cfg.principals)
            weights = capped_weights(members, principals, k)
            if weights is None:  # fewer than k principals (e.g. a client erased or refused while closing)
                self._abandon(i, cohort.size(members, principals), self.state.end_open_round.is_set())
                return
            self._record_exclusions(i, follower, excluded)
            self.store.set_membership(i, members, excluded, weights, principals)
        members, weights = self.store.round_members(i), self.store.round_weights(i)
        principals = self.store.round_principals(i)
        refusal = cohort.refusal(self.cfg.role, i, cohort.size(members, principals), k)
        if refusal is not None:  # fixed before this party's k was raised: never aggregated here
            metrics.round_below_cohort(cohort.REFUSED)
            self.store.set_round_state(i, "failed", refusal)
            metrics.round_failed()
            log.error(refusal)
            return
        digest = membership_digest(members, i)
        held = self.store.uploads(i)
        self.peer.unary(
            "AgreeMembership",
            peer_pb2.Membership(
                round=i,
                membership_sha256=digest,
                members=[
                    common_pb2.Member(
                        client_id=c,
                        n_samples=n,
                        binding_sha256=held[c].binding_sha256 if c in held else "",
                        principal=principals.get(c, ""),
                        weight=weights[c],
                    )
                    for c, n in sorted(members.items())
                ],
                excluded=[common_pb2.Exclusion(client_id=c, reason=r) for c, r in self.store.exclusions(i).items()],
            ),
        )
        if self.state.stage1_clip is not None:  # DP: clipped and noised inside 2PC (server.stage1_clip)
            new_hash = self.state.stage1_clip.lead(i, digest, self.peer)
        else:
            new_hash = self._exchange(rec, digest, members, weights)
        self._record_check_bytes(i)
        self.peer.unary("CommitRound", peer_pb2.CommitRequest(round=i, model_hash=new_hash))
        self.store.commit_round(i)
        metrics.round_committed(i, len(members))
        log.info("round %d committed with %d clients, model %s", i, len(members), new_hash[:12])

    def _exchange(self, rec: RoundRecord, digest: str, members: dict[str, int], weights: dict[str, int]) -> str:
        """Step 5–6 without DP: exchange the aggregate shares (weighted by the capped w_j); store the
        candidate M_i, its hash."""
        i = rec.round
        previous = self.store.model_by_hash(rec.model_in_hash)
        mine = local_aggregate(self.store, i, members, previous.params.size, self.state.running_sums, weights)
        data = to_wire(mine)
        header = common_pb2.ShareHeader(
            round=i, shape=[mine.size], dtype="int64", membership_sha256=digest, content_sha256=sha256_hex(data)
        )
        reply = self.peer.stream_stream(
            "ExchangeAggregate", lambda: share_messages(header, data, self.cfg.limits.chunk_bytes)
        )
        their_header, theirs = read_share_stream(iter(reply), self.cfg.limits.max_model_params)
        if their_header.membership_sha256 != digest or theirs.size != mine.size:
            raise PeerRefused(None, f"round {i}: party1's aggregate share is over another membership")
        new_params = fedavg_update(
            previous.params, mine, theirs, sum(weights.values()), rec.lr, self.cfg.precision_bits
        )
        return self.store.set_round_output(i, previous.arch, new_params, peer_bytes=2 * len(data))
