"""The FL client: talks to both parties over TLS with its per-client credential.

Typical round (DESIGN §4, §5)::

    client = Client("alice", token, party0="127.0.0.1:50051", party1="127.0.0.1:50052", ca_cert="ca.pem")
    client.register()
    state = client.wait_for_round()          # an open round i
    model = client.fetch_model()             # M_{i-1}; refused unless both parties serve the same hash
    client.submit(state.round, gradient, n_samples)   # ‖g‖, δ, shares → both parties

`submit` encodes with the parties' fixed-point setting, splits each value into two
additive shares with a CSPRNG mask (mpc.fixedpoint; for g, by default, the mask of one
party travels as a 32-byte seed, client_sdk.masks), and uploads share b to party b,
retrying transient failures with the *same* shares (uploads are idempotent).
"""

from __future__ import annotations

import logging
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import grpc
import numpy as np

from client_sdk import errors
from client_sdk.masks import seeded_share
from client_sdk.stats import l2_norm, tolerance_threshold
from client_sdk.wire import chunks, collect_model, sha256_hex
from mpc.fixedpoint import encode, share, to_wire
from proto.starfish.v1 import client_pb2, client_pb2_grpc, common_pb2

log = logging.getLogger(__name__)
TRANSIENT = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
GradFn = Callable[[np.ndarray, "TaskInfo"], tuple[np.ndarray, int]]


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


@dataclass(frozen=True)
class TaskInfo:
    task_id: str
    job_id: str
    kind: int  #: client_pb2.TaskKind
    unlearning_round: int
    original_round: int
    model_hash: str
    deadline: float


class Client:
    """One FL client connected to party0 and party1."""

    def __init__(
        self,
        client_id: str,
        token: str,
        party0: str,
        party1: str,
        ca_cert: str | Path | bytes,
        alpha: float = 0.4,
        retries: int = 6,
        backoff_s: float = 0.2,
        timeout_s: float = 60.0,
        chunk_bytes: int = 1024 * 1024,
        max_message_bytes: int = 4 * 1024 * 1024,
        compress_mask: bool = True,
    ):
        if not 0.0 < alpha <= 1.0:
            raise ValueError(f"tolerance rate alpha must be in (0, 1], got {alpha}")
        self.client_id = client_id
        self.alpha = alpha
        self.retries = retries
        self.backoff_s = backoff_s
        self.timeout_s = timeout_s
        self.chunk_bytes = chunk_bytes
        self.compress_mask = compress_mask  #: send one party only a 32-byte seed of its share (client_sdk.masks)
        self._metadata = (("x-starfish-client", client_id), ("x-starfish-token", token))
        self._checked_encoding: tuple[int, int, float] | None = None  #: (open round, f, max |x|) both parties served
        root = ca_cert if isinstance(ca_cert, bytes) else Path(ca_cert).read_bytes()
        opts = [
            ("grpc.max_send_message_length", max_message_bytes),
            ("grpc.max_receive_message_length", max_message_bytes),
        ]
        self.addresses = (party0, party1)
        self._channels = [
            grpc.secure_channel(a, grpc.ssl_channel_credentials(root_certificates=root), options=opts)
            for a in self.addresses
        ]
        self._stubs = [client_pb2_grpc.ClientServiceStub(ch) for ch in self._channels]
        self._pool = ThreadPoolExecutor(2, thread_name_prefix=f"sdk-{client_id}")

    def close(self) -> None:
        self._pool.shutdown(wait=False)
        for ch in self._channels:
            ch.close()

    def __enter__(self) -> "Client":
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
        if code in (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.NOT_FOUND):
            return errors.BadRoundError(f"{where}: {detail}")
        if code == grpc.StatusCode.ALREADY_EXISTS:
            return errors.ConflictingUploadError(f"{where}: {detail}")
        if code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED):
            return errors.UploadRejectedError(f"{where} refused the request ({code.name}): {detail}")
        if code in TRANSIENT:
            return errors.PartyUnreachableError(f"{where} unreachable after {self.retries} attempts: {detail}")
        return errors.StarfishError(f"{where} failed ({code.name}): {detail}")

    def _call(self, party: int, fn: Callable[[client_pb2_grpc.ClientServiceStub], object]):
        """Run `fn(stub)` against one party, retrying transient failures with doubling back-off."""
        delay = self.backoff_s
        for attempt in range(self.retries):
            try:
                return fn(self._stubs[party])
            except grpc.RpcError as exc:
                if exc.code() not in TRANSIENT or attempt == self.retries - 1:
                    raise self._translate(party, exc) from None
                log.info("party%d unavailable (%s); retry %d in %.2f s", party, exc.code().name, attempt + 1, delay)
            time.sleep(delay)
            delay *= 2
        raise AssertionError("unreachable")

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
        if r0.phase == r1.phase == common_pb2.ROUND_PHASE_OPEN and (r0.round, r0.model_hash) != (
            r1.round,
            r1.model_hash,
        ):
            raise errors.ModelMismatchError(
                f"party0 has round {r0.round} open from {r0.model_hash[:12]}, "
                f"party1 round {r1.round} from {r1.model_hash[:12]}"
            )
        # a round counts as open only when both parties accept uploads for it
        phase = r0.phase if r0.phase == r1.phase or r0.phase != common_pb2.ROUND_PHASE_OPEN else r1.phase
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
            self._checked_encoding = (view.round, view.precision_bits, view.max_abs)
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
        """Download M_i (latest when None) from party0 and its header from party1; the content
        must hash to the value party0 announces, and party1 must announce the same hash."""
        request = client_pb2.GetModelRequest(round=round_index or 0, latest=round_index is None)
        header_only = client_pb2.GetModelRequest(round=request.round, latest=request.latest, header_only=True)

        def get(p: int):
            if p == 0:
                return self._call(
                    0, lambda s: collect_model(s.GetModel(request, metadata=self._metadata, timeout=self.timeout_s))
                )
            return self._call(
                1, lambda s: next(iter(s.GetModel(header_only, metadata=self._metadata, timeout=self.timeout_s))).header
            ), None

        (h0, params), (h1, _) = self._both(get)
        if h0.model_hash != h1.model_hash or h0.round != h1.round:
            raise errors.ModelMismatchError(
                f"party0 serves model {h0.model_hash[:12]} (round {h0.round}), party1 "
                f"{h1.model_hash[:12]} (round {h1.round}); refusing to train on either"
            )
        return GlobalModel(h0.round, h0.arch, params, h0.model_hash, h0.lr)

    def _encoding(self, round_index: int | None) -> tuple[int, float]:
        """The fixed-point setting both parties serve; reused when both were asked while
        round `round_index` was open, asked again otherwise."""
        cached = self._checked_encoding
        if round_index is None or cached is None or cached[0] != round_index:
            view = self.round_state()
            return view.precision_bits, view.max_abs
        return cached[1], cached[2]

    def _upload(self, header_for: Callable[[int], common_pb2.UploadHeader], data: tuple[bytes, bytes]) -> list:
        def send(p: int):
            header = header_for(p)

            def messages() -> Iterator[common_pb2.UploadChunk]:
                yield common_pb2.UploadChunk(header=header)
                for piece in chunks(data[p], self.chunk_bytes):
                    yield common_pb2.UploadChunk(data=piece)

            return self._call(p, lambda s: s.UploadShares(messages(), metadata=self._metadata, timeout=self.timeout_s))

        return self._both(send)

    def _payloads(self, gradient: np.ndarray, precision: int, max_abs: float, key: str):
        """Per party: (share bytes, mask seed) of g, and the shares of ‖g‖ and δ.

        With `compress_mask` one party gets x̄ − r in full and the other only the seed of r;
        which party gets the seed is spread over clients and rounds (crc32 of `key`), so both
        parties carry half of the full shares."""
        g = np.asarray(gradient)
        if g.dtype.kind != "f":
            raise errors.EncodingError(f"gradient must be a floating-point array, got dtype {g.dtype}")
        g = g.astype(np.float64).reshape(-1)
        if not np.all(np.isfinite(g)):
            raise errors.EncodingError(f"gradient has {int(np.sum(~np.isfinite(g)))} non-finite value(s); nothing sent")
        norms = share(np.array([l2_norm(g)]), precision, max_abs)
        deltas = share(np.array([tolerance_threshold(g, self.alpha)]), precision, max_abs)
        if self.compress_mask:
            full, seed = seeded_share(encode(g, precision, max_abs))
            seed_party = zlib.crc32(key.encode("utf-8")) % 2
            grads = [(b"", seed), (b"", seed)]
            grads[1 - seed_party] = (to_wire(full), b"")
        else:
            g0, g1 = share(g, precision, max_abs)
            grads = [(to_wire(g0), b""), (to_wire(g1), b"")]
        return g.size, grads, norms, deltas

    def _submit(self, gradient: np.ndarray, n_samples: int, model_hash: str, target: dict) -> SubmitReceipt:
        if int(n_samples) != n_samples or n_samples < 1:
            raise ValueError(f"n_samples must be a positive integer, got {n_samples!r}")
        precision, max_abs = self._encoding(target.get("round"))
        key = f"{self.client_id}/{target.get('round', '')}/{target.get('task_id', '')}"
        size, grads, norms, deltas = self._payloads(gradient, precision, max_abs, key)

        def header_for(p: int) -> common_pb2.UploadHeader:
            data, seed = grads[p]
            return common_pb2.UploadHeader(
                n_samples=int(n_samples),
                shape=[size],
                dtype="int64",
                model_hash=model_hash,
                norm_share=common_pb2.Tensor(shape=[1], dtype="int64", data=to_wire(norms[p])),
                delta_share=common_pb2.Tensor(shape=[1], dtype="int64", data=to_wire(deltas[p])),
                mask_seed=seed,
                content_sha256=sha256_hex(seed or data),
                **target,
            )

        acks = self._upload(header_for, (grads[0][0], grads[1][0]))
        sent = sum(len(grads[p][0]) + header_for(p).ByteSize() for p in (0, 1))
        return SubmitReceipt(
            target.get("round"),
            target.get("task_id"),
            (acks[0].content_sha256, acks[1].content_sha256),
            (acks[0].duplicate, acks[1].duplicate),
            sent,
        )

    def submit(
        self, round_index: int, gradient: np.ndarray, n_samples: int, model_hash: str | None = None
    ) -> SubmitReceipt:
        """Share (g, ‖g‖, δ) and upload to both parties for round i (g computed at M_{i−1}).

        Raises EncodingError (non-finite / out of range) before anything is sent,
        BadRoundError when the round is not open, PartyUnreachableError after retries.
        """
        if model_hash is None:
            view = self.round_state()
            if not view.is_open or view.round != round_index:
                raise errors.BadRoundError(
                    f"round {round_index} is not open (open round: {view.round if view.is_open else 'none'})"
                )
            model_hash = view.model_hash
        return self._submit(gradient, n_samples, model_hash, {"round": int(round_index)})

    def run_round(
        self, grad_fn: Callable[[np.ndarray], tuple[np.ndarray, int]], after: int = 0, timeout_s: float = 300.0
    ) -> SubmitReceipt:
        """Wait for a round > `after`, fetch M_{i−1}, compute (g, n) = grad_fn(params), submit."""
        view = self.wait_for_round(after, timeout_s)
        model = self.fetch_model(view.round - 1)
        if model.hash != view.model_hash:
            raise errors.ModelMismatchError(
                f"round {view.round} opens from {view.model_hash[:12]}, fetched {model.hash[:12]}"
            )
        gradient, n = grad_fn(model.params)
        return self._submit(gradient, n, model.hash, {"round": view.round})

    # -- tasks (warm-up / correction) --------------------------------------------------------
    def _task_model(self, task: TaskInfo) -> np.ndarray:
        """The task's model from party0; its content hash must be the one both parties announced."""
        header, params = self._call(
            0,
            lambda s: collect_model(
                s.GetTaskModel(
                    client_pb2.TaskRef(task_id=task.task_id), metadata=self._metadata, timeout=self.timeout_s
                )
            ),
        )
        if header.model_hash != task.model_hash:
            raise errors.ModelMismatchError(
                f"task {task.task_id}: party0 serves model {header.model_hash[:12]}, "
                f"both parties announced {task.model_hash[:12]}"
            )
        return params

    def serve_tasks(self, grad_fn: GradFn, stop: threading.Event | None = None, max_tasks: int | None = None) -> int:
        """Answer warm-up/correction tasks until `stop` is set or `max_tasks` were answered.

        A task is acted on only when both parties announce it identically; the model it names
        is fetched from both and must hash to the announced value. Returns the number answered.
        """
        stop = stop or threading.Event()
        seen: dict[str, list[TaskInfo | None]] = {}
        ready: list[TaskInfo] = []
        cond = threading.Condition()
        calls = []

        def watch(p: int) -> None:
            while not stop.is_set():
                call = self._stubs[p].WatchTasks(client_pb2.WatchTasksRequest(), metadata=self._metadata)
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
                        )
                        with cond:
                            slot = seen.setdefault(t.task_id, [None, None])
                            slot[p] = info
                            if slot[0] is not None and slot[1] is not None:
                                if slot[0] == slot[1]:
                                    ready.append(info)
                                else:
                                    log.warning("task %s announced differently by the two parties; ignored", t.task_id)
                                cond.notify_all()
                except grpc.RpcError as exc:
                    if stop.is_set() or exc.code() == grpc.StatusCode.CANCELLED:
                        return
                    stop.wait(self.backoff_s)

        watchers = [threading.Thread(target=watch, args=(p,), daemon=True) for p in (0, 1)]
        for w in watchers:
            w.start()
        answered = 0
        try:
            while not stop.is_set() and (max_tasks is None or answered < max_tasks):
                with cond:
                    if not ready:
                        cond.wait(0.2)
                        continue
                    task = ready.pop(0)
                if task.deadline < time.time():
                    continue
                params = self._task_model(task)
                gradient, n = grad_fn(params, task)
                self._submit(gradient, n, task.model_hash, {"task_id": task.task_id})
                answered += 1
        finally:
            stop.set()
            for call in calls:
                call.cancel()
        return answered
