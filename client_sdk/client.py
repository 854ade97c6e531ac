"""The FL client: talks to both parties over TLS with its per-client credential.

Typical round (docs/SERVICE.md, "Client SDK")::

    client = Client("alice", token, party0="127.0.0.1:50051", party1="127.0.0.1:50052", ca_cert="ca.pem")
    client.register()
    state = client.wait_for_round()          # an open round i
    model = client.fetch_model()             # M_{i-1}; refused unless both parties serve the same hash
    client.submit(state.round, gradient, n_samples)   # ‖g‖, δ, shares → both parties

`submit` encodes with the parties' fixed-point setting, splits each value into two
additive shares with a CSPRNG mask and binds the two halves (client_sdk.sharing), writes
the sharing to the client's outbox (client_sdk.outbox) before sending anything, and
uploads half p to party p, retrying transient failures with capped exponential back-off
until the round's deadline (client_sdk.retry). Every retry — also by a restarted process
with the same outbox — resends the same sharing, so the two parties always hold two
halves of one sharing. `upload_status(i)` tells whether the upload counted.
"""

from __future__ import annotations

import logging
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import grpc
import numpy as np

from client_sdk import errors
from client_sdk.channels import PartyChannels
from client_sdk.evaluation import EvalFn, answer_shares
from client_sdk.outbox import Entry, Outbox, default_outbox_root, federation_id
from client_sdk.retry import LATE_TASK, Behaviour, RetryPolicy, behaviour, is_transient
from client_sdk.sharing import Sharing, checked_gradient, fingerprint, make_sharing
from client_sdk.stats import clip_to_norm
from client_sdk.status import UploadStatus, combine
from proto.binding import round_target, task_target
from proto.starfish.v1 import client_pb2, client_pb2_grpc, common_pb2
from proto.wire import chunked_messages, collect_model

log = logging.getLogger(__name__)
#: definite refusals: the party did not store the half (a retry of the same bytes cannot help)
REFUSED = (errors.BadRoundError, errors.UploadRejectedError, errors.NotRegisteredError)
CLOSING_POLL_S = 0.5  #: how often a refused upload asks whether its closing round has an outcome yet
SETTLE_WAIT_S = 1.0  #: how long forgetting decided outbox entries may retry a party after an upload


@dataclass(frozen=True)
class GlobalModel:
    round: int
    arch: str
    params: np.ndarray  #: flat float32
    hash: str
    lr: float


@dataclass(frozen=True)
class RoundView:
    round: int
    phase: int  #: common_pb2.RoundPhase
    model_hash: str
    deadline: float
    latest_committed: int
    precision_bits: int
    max_abs: float
    error: str

    @property
    def is_open(self) -> bool:
        return self.phase == common_pb2.ROUND_PHASE_OPEN


@dataclass(frozen=True)
class SubmitReceipt:
    round: int | None
    task_id: str | None
    content_sha256: tuple[str, str]  #: per party (the two shares differ)
    duplicate: tuple[bool, bool]
    bytes_sent: int
    binding_sha256: str = ""  #: binding of the two halves (equal on both parties)
    resumed: bool = False  #: the sharing was made earlier (by this or a previous process) and resent


@dataclass(frozen=True)
class TaskInfo:
    task_id: str
    job_id: str
    kind: int  #: client_pb2.TaskKind
    unlearning_round: int
    original_round: int
    model_hash: str
    deadline: float
    probe: str = ""  #: evaluation tasks: the operator's probe ("" = none)
    max_eval_samples: int = 0  #: evaluation tasks: N, the bound on every count


GradFn = Callable[[np.ndarray, TaskInfo], tuple[np.ndarray, int]]


class Client:
    """One FL client connected to party0 and party1.

    Retries: `backoff_s` (first back-off), `max_backoff_s` (cap), `retry_s` (budget of a call
    other than an upload), `retries` (optional cap on its attempts), `upload_retry_s` (None:
    an upload retries until the round's deadline + `deadline_grace_s`). Outbox: `outbox_dir`
    (default: `default_outbox_root()/<deployment id>/<client id>`, see client_sdk.outbox).
    Channels: the client opens its own TLS channel to each party, or uses `channels`
    (client_sdk.channels, shared by several clients of one process; not closed by `close`,
    and their own message size limit applies).
    """

    def __init__(
        self,
        client_id: str,
        token: str,
        party0: str,
        party1: str,
        ca_cert: str | Path | bytes,
        alpha: float = 0.4,
        retries: int | None = None,
        backoff_s: float = 0.2,
        timeout_s: float = 60.0,
        chunk_bytes: int = 1024 * 1024,
        max_message_bytes: int = 4 * 1024 * 1024,
        compress_mask: bool = True,
        *,
        max_backoff_s: float = 5.0,
        retry_s: float = 30.0,
        upload_retry_s: float | None = None,
        deadline_grace_s: float = 10.0,
        outbox_dir: str | Path | None = None,
        clip_norm: float | None = None,
        channels: PartyChannels | None = None,
    ):
        if not 0.0 < alpha <= 1.0:
            raise ValueError(f"tolerance rate alpha must be in (0, 1], got {alpha}")
        self.client_id = client_id
        self.alpha = alpha
        self.retry = RetryPolicy(backoff_s, max_backoff_s, retry_s, retries, upload_retry_s, deadline_grace_s)
        self.timeout_s = timeout_s
        self.chunk_bytes = chunk_bytes
        self.compress_mask = compress_mask  #: send one party only a 33-byte seed of its share (mpc.masks)
        #: the operator's DP clipping norm C: round uploads are clipped to it (docs/PRIVACY.md); None: off
        self.clip_norm = clip_norm
        if clip_norm is not None:
            clip_to_norm(np.zeros(1), clip_norm)  # refuses a bad norm now, not at the first round
        self._metadata = (("x-starfish-client", client_id), ("x-starfish-token", token))
        self.model_party = model_party(client_id)
        #: (open round, f, max |x|, deadline) both parties served
        self._checked_encoding: tuple[int, int, float, float] | None = None
        root = ca_cert if isinstance(ca_cert, bytes) else Path(ca_cert).read_bytes()
        self.addresses = (party0, party1)
        if channels is not None and not channels.serves(party0, party1, root):
            raise ValueError("the shared channels lead to other parties (addresses or CA differ)")
        self._own_channels = channels is None
        self.channels = channels or PartyChannels(party0, party1, root, max_message_bytes)
        self._stubs = self.channels.stubs
        #: the calls to both parties in flight; four: two such pairs at once (e.g. registering
        #: beside the round check), threads started only when needed
        self._pool = ThreadPoolExecutor(4, thread_name_prefix=f"sdk-{client_id}")
        where = (
            Path(outbox_dir) if outbox_dir is not None else default_outbox_root() / federation_id(root, *self.addresses)
        )
        self.outbox = Outbox(where / client_id if outbox_dir is None else where)

    def close(self) -> None:
        """Release the client's threads; its channels too unless they are shared (`channels`)."""
        self._pool.shutdown(wait=False)
        if self._own_channels:
            self.channels.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- calls ----------------------------------------------------------------------------
    def _translate(self, party: int, exc: grpc.RpcError) -> errors.StarfishError:
        code, detail = exc.code(), exc.details() or ""
        where = f"party{party} ({self.addresses[party]})"
        if code == grpc.StatusCode.UNAUTHENTICATED:
            return errors.AuthenticationError(f"{where} rejected client {self.client_id!r}: {detail}")
        if code == grpc.StatusCode.PERMISSION_DENIED:
            return errors.NotRegisteredError(f"{where}: {detail}")
        if code == grpc.StatusCode.FAILED_PRECONDITION and "not registered" in detail:
            return errors.NotRegisteredError(f"{where}: {detail}")
        if code == grpc.StatusCode.FAILED_PRECONDITION and "sample budget" in detail:
            return errors.UploadRejectedError(f"{where} refused the upload: {detail}")
        if behaviour(code, detail) is Behaviour.NEXT_ROUND and LATE_TASK in detail:
            return errors.TaskExpiredError(f"{where}: {detail}")
        if code in (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.NOT_FOUND):
            return errors.BadRoundError(f"{where}: {detail}")
        if code == grpc.StatusCode.ALREADY_EXISTS:
            return errors.ConflictingUploadError(f"{where}: {detail}")
        if code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.OUT_OF_RANGE):
            return errors.UploadRejectedError(f"{where} refused the request ({code.name}): {detail}")
        return errors.StarfishError(f"{where} failed ({code.name}): {detail}")

    def _call(self, party: int, fn: Callable[[client_pb2_grpc.ClientServiceStub], object], until: float | None = None):
        """Run `fn(stub)` against one party, retrying transient failures (client_sdk.retry) until
        `until` (unix time; default: the call budget and attempt cap of the retry policy)."""
        start = time.time()
        end = start + self.retry.budget_s if until is None else until
        cap = self.retry.max_attempts if until is None else None
        attempt = 0
        while True:
            try:
                return fn(self._stubs[party])
            except grpc.RpcError as exc:
                if not is_transient(exc):
                    raise self._translate(party, exc) from None
                attempt += 1
                delay = self.retry.delay(attempt)
                if (cap is not None and attempt >= cap) or time.time() + delay > end:
                    raise errors.PartyUnreachableError(
                        f"party{party} ({self.addresses[party]}) unreachable after {attempt} attempt(s) over "
                        f"{time.time() - start:.1f} s ({exc.code().name}: {exc.details()})"
                    ) from None
                log.info("party%d: %s; retry %d in %.2f s", party, exc.code().name, attempt, delay)
            time.sleep(delay)

    def _both(self, fn: Callable[[int], object]) -> list:
        """Run `fn(party)` for both parties concurrently; re-raise the first error."""
        futures = [self._pool.submit(fn, p) for p in (0, 1)]
        return [f.result() for f in futures]

    # -- API -------------------------------------------------------------------------------
    def register(self) -> tuple[int, float]:
        """Enrol for training on both parties; returns the agreed (precision bits, max |x|)."""
        replies = self._both(
            lambda p: self._call(
                p, lambda s: s.Register(client_pb2.RegisterRequest(), metadata=self._metadata, timeout=self.timeout_s)
            )
        )
        enc = {(r.precision_bits, r.max_abs) for r in replies}
        if len(enc) != 1:
            raise errors.ModelMismatchError(f"the parties serve different fixed-point settings: {sorted(enc)}")
        return enc.pop()

    def round_state(self) -> RoundView:
        """The training state on both parties; refuses if they disagree on the open round or its model."""
        replies = self._both(
            lambda p: self._call(
                p, lambda s: s.GetRound(client_pb2.GetRoundRequest(), metadata=self._metadata, timeout=self.timeout_s)
            )
        )
        r0, r1 = replies
        if (r0.precision_bits, r0.max_abs) != (r1.precision_bits, r1.max_abs):
            raise errors.ModelMismatchError(
                "the parties serve different fixed-point settings: "
                f"party0 f={r0.precision_bits}, party1 f={r1.precision_bits}"
            )
        both_open = r0.phase == r1.phase == common_pb2.ROUND_PHASE_OPEN
        if both_open and r0.round == r1.round and r0.model_hash != r1.model_hash:
            raise errors.ModelMismatchError(
                f"party0 has round {r0.round} open from {r0.model_hash[:12]}, "
                f"party1 the same round from {r1.model_hash[:12]}"
            )
        # a round counts as open only when both parties accept uploads for it; two different open
        # rounds are replies from different moments (one answered after a retry): not open yet
        phase = r0.phase if r0.phase == r1.phase or r0.phase != common_pb2.ROUND_PHASE_OPEN else r1.phase
        if both_open and r0.round != r1.round:
            phase = common_pb2.ROUND_PHASE_CLOSING
        view = RoundView(
            r0.round,
            phase,
            r0.model_hash,
            r0.deadline_unix,
            r0.latest_committed,
            r0.precision_bits,
            r0.max_abs,
            r0.error or r1.error,
        )
        if view.is_open:
            self._checked_encoding = (view.round, view.precision_bits, view.max_abs, view.deadline)
        return view

    def wait_for_round(self, after: int = 0, timeout_s: float = 300.0, poll_s: float = 0.1) -> RoundView:
        """Block until a round numbered > `after` is open on both parties."""
        end = time.time() + timeout_s
        while True:
            view = self.round_state()
            if view.phase == common_pb2.ROUND_PHASE_HALTED:
                raise errors.BadRoundError(f"training halted: {view.error}")
            if view.is_open and view.round > after:
                return view
            if time.time() > end:
                raise errors.BadRoundError(
                    f"no round after {after} opened within {timeout_s} s (now: round {view.round})"
                )
            time.sleep(poll_s)

    def fetch_model(self, round_index: int | None = None) -> GlobalModel:
        """Download M_i (latest when None) from the client's `model_party` and its header from
        the other; the content must hash to the value the serving party announces, and the
        other party must announce the same hash."""
        request = client_pb2.GetModelRequest(round=round_index or 0, latest=round_index is None)
        header_only = client_pb2.GetModelRequest(round=request.round, latest=request.latest, header_only=True)

        def get(p: int):
            if p == self.model_party:
                return self._call(
                    p, lambda s: collect_model(s.GetModel(request, metadata=self._metadata, timeout=self.timeout_s))
                )
            return self._call(
                p, lambda s: next(iter(s.GetModel(header_only, metadata=self._metadata, timeout=self.timeout_s))).header
            ), None

        got = self._both(get)
        (h, params), (other, _) = got[self.model_party], got[1 - self.model_party]
        if h.model_hash != other.model_hash or h.round != other.round:
            raise errors.ModelMismatchError(
                f"party{self.model_party} serves model {h.model_hash[:12]} (round {h.round}), "
                f"party{1 - self.model_party} announces {other.model_hash[:12]} (round {other.round}); "
                "refusing to train on either"
            )
        return GlobalModel(h.round, h.arch, params, h.model_hash, h.lr)

    def upload_status(self, round_index: int, until: float | None = None) -> UploadStatus:
        """What became of this client's upload for round i, from both parties (client_sdk.status);
        `until` (unix time) bounds the retries (default: the call budget)."""
        request = client_pb2.UploadStatusRequest(round=int(round_index))
        s0, s1 = self._both(
            lambda p: self._call(
                p, lambda s: s.GetUploadStatus(request, metadata=self._metadata, timeout=self.timeout_s), until
            )
        )
        return combine(int(round_index), s0, s1)

    # -- uploads ----------------------------------------------------------------------------
    def _encoding(self, round_index: int | None) -> tuple[tuple[int, float], float]:
        """((f, max |x|), deadline) both parties serve; reused when both were asked while round
        `round_index` was open, asked again otherwise."""
        cached = self._checked_encoding
        if round_index is None or cached is None or cached[0] != round_index:
            view = self.round_state()
            return (view.precision_bits, view.max_abs), view.deadline
        return (cached[1], cached[2]), cached[3]

    def _check_same(self, entry: Entry, gradient: np.ndarray, n_samples: int, model_hash: str | None) -> None:
        """A second submission for a target must carry the values of the sharing already made."""
        g = checked_gradient(gradient)
        if fingerprint(bytes.fromhex(entry.sharing_id), g, n_samples, model_hash or entry.model_hash) != (
            entry.fingerprint
        ):
            raise errors.ConflictingUploadError(
                f"client {self.client_id!r} already made a different upload for {entry.target} "
                f"(outbox {self.outbox.dir}); uploads cannot be replaced"
            )

    def _send_half(self, sharing: Sharing, party: int, until: float) -> int:
        """Send party p's half until acknowledged and record the acknowledgement durably (at
        once: the other party may stay unreachable for long); returns the bytes sent."""
        header = sharing.header(party)
        data = sharing.halves[party].data

        def messages() -> Iterator[common_pb2.UploadChunk]:
            return chunked_messages(common_pb2.UploadChunk, header, data, self.chunk_bytes)

        ack = self._call(
            party, lambda s: s.UploadShares(messages(), metadata=self._metadata, timeout=self.timeout_s), until
        )
        if ack.content_sha256 != sharing.halves[party].content_sha256:
            raise errors.StarfishError(f"party{party} acknowledged content {ack.content_sha256[:12]}, not ours")
        self.outbox.record_ack(sharing.target, party, ack.duplicate)
        return len(data) + header.ByteSize()

    def _deliver(self, entry: Entry, until: float) -> int:
        """Send the halves not yet acknowledged; returns the bytes sent. When both parties refused
        definitely (neither stored anything), the entry is dropped so that a corrected call can
        make a new sharing."""
        sharing = entry.sharing
        if sharing is None:
            return 0
        futures = {p: self._pool.submit(self._send_half, sharing, p, until) for p in (0, 1) if not entry.acked[p]}
        failures = {p: f.exception() for p, f in futures.items() if f.exception() is not None}
        if not failures:
            return sum(f.result() for f in futures.values())
        acked_somewhere = any(self.outbox.load(entry.target).acked)
        if not acked_somewhere and len(failures) == 2 and all(isinstance(e, REFUSED) for e in failures.values()):
            self.outbox.remove(entry.target)
        raise failures[min(failures)]

    def _send_entry(self, entry: Entry, resumed: bool) -> SubmitReceipt:
        """Deliver an outbox entry (round or task) and report; a round that closed without it
        raises RoundClosedError with the parties' reason."""
        kind, _, value = entry.target.partition(":")
        sent = 0
        if not all(entry.acked):
            until = self.retry.upload_until(entry.deadline, time.time())
            try:
                sent = self._deliver(entry, until)
            except errors.TaskExpiredError:
                self.outbox.remove(entry.target)  # refused as late: dropped at once, never resent
                raise
            except errors.BadRoundError:
                if kind == "round":
                    self._raise_if_closed(int(value), until)
                raise
            entry = self.outbox.load(entry.target)
        if kind == "task":
            self.outbox.remove(entry.target)  # both halves acknowledged: nothing left to resend
        return SubmitReceipt(
            int(value) if kind == "round" else None,
            value if kind == "task" else None,
            entry.content_sha256,
            entry.duplicate,
            sent,
            entry.binding_sha256,
            resumed,
        )

    def _raise_if_closed(self, round_index: int, until: float) -> None:
        """After a party refused a round upload: wait (until `until`) while round i is still
        closing; if it has an outcome without this upload, forget the entry and raise
        RoundClosedError naming the reason (resubmit in the next round)."""
        status = self.upload_status(round_index)
        while status.outcome == "pending" and time.time() < until:
            time.sleep(CLOSING_POLL_S)
            status = self.upload_status(round_index)
        if status.final and status.outcome != "counted":
            self.outbox.remove(round_target(round_index))
            raise errors.RoundClosedError(
                f"round {round_index} closed without this client's upload ({status.outcome}): {status.reason}", status
            )

    def _settle(self, before_round: int) -> None:
        """Forget outbox entries of rounds before `before_round` whose outcome both parties report."""
        for target in self.outbox.targets():
            kind, _, value = target.partition(":")
            if kind != "round" or int(value) >= before_round:
                continue
            try:  # a short try: a party that is down only postpones this to the next submit
                status = self.upload_status(int(value), until=time.time() + SETTLE_WAIT_S)
            except errors.StarfishError as exc:
                log.info("outcome of %s not known yet: %s", target, exc)
                continue
            if status.final:
                log.info("%s of %s: %s %s", target, self.client_id, status.outcome, status.reason)
                self.outbox.remove(target)

    def _make_and_send(
        self,
        target: str,
        gradient: np.ndarray,
        n_samples: int,
        model_hash: str,
        encoding: tuple[int, float],
        deadline: float,
    ) -> SubmitReceipt:
        """Make the target's sharing once, write it to the outbox (durably), then deliver it."""
        sharing = make_sharing(
            self.client_id, target, gradient, n_samples, model_hash, encoding, self.alpha, self.compress_mask
        )
        return self._send_entry(self.outbox.save(sharing, deadline), resumed=False)

    def _submit_round(self, round_index: int, gradient: np.ndarray, n_samples: int, model_hash: str) -> SubmitReceipt:
        encoding, deadline = self._encoding(round_index)
        if self.clip_norm is not None:
            gradient = clip_to_norm(gradient, self.clip_norm)
        receipt = self._make_and_send(round_target(round_index), gradient, n_samples, model_hash, encoding, deadline)
        self._settle(round_index)
        return receipt

    def _submit_task(self, task: TaskInfo, gradient: np.ndarray, n_samples: int) -> SubmitReceipt:
        _check_samples(n_samples)
        entry = self.outbox.load(task_target(task.task_id))
        if entry is not None:
            self._check_same(entry, gradient, n_samples, task.model_hash)
            return self._send_entry(entry, resumed=True)
        encoding, _ = self._encoding(None)
        return self._make_and_send(
            task_target(task.task_id), gradient, n_samples, task.model_hash, encoding, task.deadline
        )

    def submit(
        self, round_index: int, gradient: np.ndarray, n_samples: int, model_hash: str | None = None
    ) -> SubmitReceipt:
        """Share (g, ‖g‖, δ) and upload to both parties for round i (g computed at M_{i−1}).

        A second call for round i (also from a restarted process with the same outbox) resends
        the sharing made by the first; it must carry the same values (else
        ConflictingUploadError, nothing sent). Raises EncodingError (non-finite / out of range)
        before anything is written or sent, BadRoundError when the round is not open,
        RoundClosedError when it closed without this upload, PartyUnreachableError when a
        party stayed unreachable until the round's deadline (the outbox keeps the sharing:
        call again to resume).
        """
        _check_samples(n_samples)
        if self.clip_norm is not None:  # compared with the outbox as it will be sent
            gradient = clip_to_norm(gradient, self.clip_norm)
        entry = self.outbox.load(round_target(round_index))
        if entry is not None:
            self._check_same(entry, gradient, n_samples, model_hash)
            return self._send_entry(entry, resumed=True)
        if model_hash is None:
            view = self.round_state()
            if not view.is_open or view.round != round_index:
                raise errors.BadRoundError(
                    f"round {round_index} is not open (open round: {view.round if view.is_open else 'none'})"
                )
            model_hash = view.model_hash
        return self._submit_round(int(round_index), gradient, n_samples, model_hash)

    def run_round(
        self, grad_fn: Callable[[np.ndarray], tuple[np.ndarray, int]], after: int = 0, timeout_s: float = 300.0
    ) -> SubmitReceipt:
        """Wait for a round > `after`, fetch M_{i−1}, compute (g, n) = grad_fn(params), submit.
        When the outbox already holds this client's sharing for the round (made before a
        restart), that sharing is resent and `grad_fn` is not called."""
        view = self.wait_for_round(after, timeout_s)
        entry = self.outbox.load(round_target(view.round))
        if entry is not None:
            return self._send_entry(entry, resumed=True)
        model = self.fetch_model(view.round - 1)
        if model.hash != view.model_hash:
            raise errors.ModelMismatchError(
                f"round {view.round} opens from {view.model_hash[:12]}, fetched {model.hash[:12]}"
            )
        gradient, n = grad_fn(model.params)
        _check_samples(n)
        return self._submit_round(view.round, gradient, n, model.hash)

    def pending_uploads(self) -> list[str]:
        """Targets ("round:<i>", "task:<id>") the outbox still holds, oldest first."""
        return self.outbox.targets()

    def resume_pending(self) -> dict[str, SubmitReceipt | UploadStatus | errors.StarfishError]:
        """Resend every unacknowledged sharing in the outbox, and report the outcome of acknowledged
        ones (forgetting those that are final). Returns what happened per target."""
        results: dict[str, SubmitReceipt | UploadStatus | errors.StarfishError] = {}
        for target in self.outbox.targets():
            entry = self.outbox.load(target)
            try:
                if entry is None or not all(entry.acked) or not target.startswith("round:"):
                    if entry is not None:
                        results[target] = self._send_entry(entry, resumed=True)
                    continue
                status = self.upload_status(int(target.partition(":")[2]))
                if status.final:
                    self.outbox.remove(target)
                results[target] = status
            except errors.StarfishError as exc:
                results[target] = exc
        return results

    # -- tasks (warm-up / correction) --------------------------------------------------------
    def _task_model(self, task: TaskInfo) -> np.ndarray:
        """The task's model from the client's `model_party`; its content hash must be the one
        both parties announced."""
        p = self.model_party
        header, params = self._call(
            p,
            lambda s: collect_model(
                s.GetTaskModel(
                    client_pb2.TaskRef(task_id=task.task_id), metadata=self._metadata, timeout=self.timeout_s
                )
            ),
        )
        if header.model_hash != task.model_hash:
            raise errors.ModelMismatchError(
                f"task {task.task_id}: party{p} serves model {header.model_hash[:12]}, "
                f"both parties announced {task.model_hash[:12]}"
            )
        return params

    def serve_tasks(
        self,
        grad_fn: GradFn,
        stop: threading.Event | None = None,
        max_tasks: int | None = None,
        eval_fn: EvalFn | None = None,
    ) -> int:
        """Answer warm-up/correction tasks until `stop` is set or `max_tasks` were answered.

        A task is acted on only when both parties announce it identically; the model it names
        is fetched from both and must hash to the announced value. Evaluation tasks (after a
        job succeeded) are answered with `eval_fn(M̂, M_T, task) → EvalCounts` when one is
        registered (client_sdk.evaluation), else ignored. Returns the number answered.
        """
        stop = stop or threading.Event()
        inbox = _TaskInbox()
        calls: list = []
        watchers = [
            threading.Thread(target=self._watch_tasks, args=(p, inbox, stop, calls), daemon=True) for p in (0, 1)
        ]
        for w in watchers:
            w.start()
        answered = 0
        try:
            while not stop.is_set() and (max_tasks is None or answered < max_tasks):
                task = inbox.next(0.2)
                if task is None or task.deadline < time.time():
                    continue
                if task.kind == client_pb2.TASK_KIND_EVALUATE:
                    answered += self._answer_evaluation(task, eval_fn)
                    continue
                params = self._task_model(task)
                gradient, n = grad_fn(params, task)
                try:
                    self._submit_task(task, gradient, n)
                except errors.TaskExpiredError as exc:  # dropped: the job asks again in a new task
                    log.warning("task %s answered too late; dropped: %s", task.task_id, exc)
                    continue
                answered += 1
        finally:
            stop.set()
            for call in calls:
                call.cancel()
        return answered

    def _answer_evaluation(self, task: TaskInfo, eval_fn: EvalFn | None) -> int:
        """Score M̂ (the task's model) and M_T (global model `original_round`) with `eval_fn` and
        send one share of the counts to each party (client_sdk.evaluation); 1 when answered."""
        if eval_fn is None:
            log.info("evaluation task %s ignored: no evaluation callback is registered", task.task_id)
            return 0
        new = self._task_model(task)
        old = self.fetch_model(task.original_round).params
        try:
            halves = answer_shares(eval_fn(new, old, task), task.max_eval_samples)
        except ValueError as exc:  # the callback's counts break a rule: nothing is sent
            log.warning("evaluation task %s not answered: %s", task.task_id, exc)
            return 0
        try:
            self.submit_evaluation(task, halves)
        except errors.TaskExpiredError as exc:
            log.warning("evaluation task %s answered too late; dropped: %s", task.task_id, exc)
            return 0
        return 1

    def submit_evaluation(self, task: TaskInfo, halves: tuple[np.ndarray, np.ndarray]) -> list:
        """Send share p of an evaluation answer (client_sdk.evaluation.answer_shares) to party p,
        retrying transient failures until the task's deadline; the two acknowledgements."""

        def send(p: int):
            answer = client_pb2.EvaluationAnswer(task_id=task.task_id, words=halves[p].tolist())
            call = lambda s: s.SubmitEvaluation(answer, metadata=self._metadata, timeout=self.timeout_s)  # noqa: E731
            return self._call(p, call, task.deadline)

        return self._both(send)

    def _watch_tasks(self, party: int, inbox: _TaskInbox, stop: threading.Event, calls: list) -> None:
        """Follow one party's task stream into `inbox`, reconnecting with back-off whenever it
        ends (a party stopping or restarting); a stream that delivered a task resets the back-off."""
        retry = 0
        while not stop.is_set():
            call = self._stubs[party].WatchTasks(client_pb2.WatchTasksRequest(), metadata=self._metadata)
            calls.append(call)
            try:
                for t in call:
                    info = TaskInfo(
                        t.task_id,
                        t.job_id,
                        t.kind,
                        t.unlearning_round,
                        t.original_round,
                        t.model_hash,
                        t.deadline_unix,
                        t.probe,
                        t.max_eval_samples,
                    )
                    inbox.offer(party, info)
                    retry = 0
            except grpc.RpcError as exc:
                if stop.is_set():
                    return
                log.info("party%d: task stream ended (%s); reconnecting", party, exc.code().name)
            calls.remove(call)
            retry += 1
            stop.wait(self.retry.delay(retry))


class _TaskInbox:
    """Tasks announced by the two parties; one is ready once both announced it identically."""

    def __init__(self) -> None:
        self._seen: dict[str, list[TaskInfo | None]] = {}
        self._ready: list[TaskInfo] = []
        self._cond = threading.Condition()

    def offer(self, party: int, info: TaskInfo) -> None:
        with self._cond:
            slot = self._seen.setdefault(info.task_id, [None, None])
            slot[party] = info
            if slot[0] is not None and slot[1] is not None:
                if slot[0] == slot[1]:
                    self._ready.append(info)
                else:
                    log.warning("task %s announced differently by the two parties; ignored", info.task_id)
                self._cond.notify_all()

    def next(self, timeout_s: float) -> TaskInfo | None:
        """The oldest ready task, waiting up to `timeout_s` for one."""
        with self._cond:
            if not self._ready:
                self._cond.wait(timeout_s)
            return self._ready.pop(0) if self._ready else None


def model_party(client_id: str) -> int:
    """The party whose uplink carries the client's model downloads (the other sends only the
    header): crc32 of the id mod 2, so each party serves about half the clients."""
    return zlib.crc32(client_id.encode()) % 2


def _check_samples(n_samples: int) -> None:
    if int(n_samples) != n_samples or n_samples < 1:
        raise ValueError(f"n_samples must be a positive integer, got {n_samples!r}")
