"""Input validation, party0's side: a batch of uploads or task answers checked in 2PC with
party1 (docs/SERVICE.md, "Input validation"; docs/PRIVACY.md, "Malicious clients").

The protocol is `mpc.input_check.check_batch`; this module runs it over the peer channel
and a dealer session. A batch, led by party0:

1. the items are fixed (a round's candidate members, or a job step's answers); party0
   draws a 32-byte seed from the OS CSPRNG and a fresh batch id, which also names the
   batch's dealer session;
2. StartCheck(batch id, seed, round, items, dealer identity, party0's max_norm): party1
   checks that it holds every item and that the bound is its own, and joins the dealer
   session (server.upload_check_peer); party0 joins it as rank 0;
3. both parties run `check_batch` over all items at once, each item with its client's seed
   HMAC(seed, client) (each client appears once per batch); each exchange is one CheckStep
   call carrying every item's vector of that step: party0's int64 vector out, party1's back
   — 3 calls per batch, 6 when a refused item is checked again (a batch too large for one
   step vector is cut by `batch_sizes` into parts of 6 step numbers each, 6c..6c+5 for part c);
4. FinishCheck: party1's verdicts, which it recorded durably; party0 compares them with
   its own (the opened bits are the same on both parties).

Only the verdict bits are opened. A batch that cannot complete (the dealer, the peer, a
timeout) raises `CheckFailed` and decides nothing: the caller retries with a new batch.
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from mpc.input_check import (
    MAX_STEP_WORDS,
    SEED_BYTES,
    CheckBounds,
    HeldInput,
    Verdict,
    batch_sizes,
    check_batch,
    client_seed,
    largest_norm,
)
from mpc.plane.dealer_client import DealerError, DealerLink, open_dealer_link
from mpc.plane.dealer_ops import OPS, Request
from mpc.plane.tls import TlsFiles, client_context
from proto.starfish.v1 import peer_pb2
from proto.wire import StreamError, sha256_hex, split_header
from server import metrics
from server.config import PartyConfig
from server.open_round_shares import OpenRoundShares
from server.peer_client import PeerClient, PeerRefused
from server.storage_faults import classify
from server.store import Store

log = logging.getLogger(__name__)


class CheckFailed(RuntimeError):
    """A check batch did not complete; nothing was decided (the caller retries). `process`
    names the process that failed it: "dealer", "party0" or "party1"."""

    def __init__(self, message: str, process: str = "party1"):
        super().__init__(message)
        self.process = process


@dataclass(frozen=True)
class Item:
    """One thing to check: a client's upload to a round (task_id "") or a task answer."""

    client_id: str
    task_id: str = ""


def check_bounds(cfg: PartyConfig, num_params: int) -> CheckBounds:
    """This party's bounds for a model of `num_params`: `[validation] max_norm`, or (0) the
    largest the ring allows (ValueError when the configured bound is above it)."""
    max_norm = cfg.validation.max_norm or largest_norm(num_params, cfg.precision_bits)
    return CheckBounds.make(num_params, cfg.precision_bits, max_norm)


def bounds_refusal(cfg: PartyConfig, num_params: int) -> str | None:
    """Why a model of `num_params` cannot be trained under this party's `[validation]`, or None."""
    if not cfg.validation.enabled:
        return None
    try:
        check_bounds(cfg, num_params)
    except ValueError as exc:
        return f"[validation] max_norm: {exc}"
    return None


def held_input(store: Store, round_index: int, item: Item, shares: OpenRoundShares | None = None) -> HeldInput:
    """This party's shares of the item: an upload's from `shares` when they hold it under the
    stored content hash, else from the store (a seed-compressed share expanded); KeyError if
    not held."""
    if item.task_id:
        task = store.task(item.task_id)
        bundle = store.load_task_share(item.task_id) if task is not None and task.client == item.client_id else None
        if bundle is None:
            raise KeyError(f"no answer of {item.client_id!r} to task {item.task_id}")
    else:
        record = store.upload(round_index, item.client_id)
        if record is None:
            raise KeyError(f"no upload of {item.client_id!r} to round {round_index}")
        kept = shares.take(round_index, item.client_id, record.grad_sha256) if shares is not None else None
        bundle = kept if kept is not None else store.load_share(round_index, item.client_id)
    gradient = np.ascontiguousarray(bundle.gradient, dtype=np.int64).reshape(-1)
    return HeldInput(gradient, int(bundle.norm.reshape(-1)[0]), int(bundle.delta.reshape(-1)[0]))


def holds(store: Store, round_index: int, item: Item) -> bool:
    """Whether this party holds the item (its upload's record, or the client's answer to the
    task), without reading its shares."""
    if item.task_id:
        return store.answered(item.task_id, item.client_id)
    return store.upload(round_index, item.client_id) is not None


class DealerCorrelation:
    """`private_dot` correlations of one dealer session, as `check_input` asks for them."""

    def __init__(self, link: DealerLink) -> None:
        self.link = link

    def private_dots(self, shapes: list[tuple[int, int]]) -> list[tuple[np.ndarray, np.ndarray]]:
        """All blocks in one request (party 0 fetches V_0 of Σ rows words)."""
        request = Request("private_dot", tuple(shapes))
        total = sum(rows for rows, _ in shapes)
        local, share = OPS["private_dot"].party_shares(
            self.link.prg, self.link.rank, request, lambda r: self.link.fetch(r, (total,))
        )
        cuts = np.cumsum([rows for rows, _ in shapes])[:-1]
        return [(m.numpy(), g) for m, g in zip(local, np.split(share.numpy(), cuts), strict=True)]


def open_link(cfg: PartyConfig, batch_id: str) -> DealerLink:
    """Join the batch's dealer session as this party's rank (DealerError when it fails)."""
    host, port = cfg.jobs.dealer_address
    ctx = client_context(TlsFiles(cfg.tls.ca, cfg.tls.cert, cfg.tls.key))
    timeout_s = cfg.jobs.session_timeout_s
    try:
        return open_dealer_link(host, port, ctx, cfg.jobs.dealer_identity, batch_id, cfg.role, timeout_s)
    except DealerError:
        raise
    except OSError as exc:  # unreachable, refused, another identity: the dealer's side of the batch
        raise DealerError(str(exc)) from None


# ---------------------------------------------------------------------------- step vectors
def step_messages(header: peer_pb2.CheckStepHeader, vector: np.ndarray, chunk_bytes: int) -> Iterator:
    """`CheckChunk`s of one step: the header (words, content hash), then the int64 bytes,
    each chunk copied once out of the vector (no whole-vector byte string)."""
    data = memoryview(np.ascontiguousarray(vector, dtype="<i8")).cast("B")
    header.words, header.content_sha256 = len(data) // 8, sha256_hex(data)
    yield peer_pb2.CheckChunk(header=header)
    for start in range(0, len(data), chunk_bytes):
        yield peer_pb2.CheckChunk(data=bytes(data[start : start + chunk_bytes]))


def read_step(stream: Iterable, max_words: int) -> tuple[peer_pb2.CheckStepHeader, np.ndarray]:
    """(header, int64 vector) of a `CheckChunk` stream; length and content hash checked."""
    header, rest = split_header(stream, "a check step")
    return header, read_step_body(header, rest, max_words)


def read_step_body(header: peer_pb2.CheckStepHeader, rest: Iterable, max_words: int) -> np.ndarray:
    """The int64 vector after a step's header. Each chunk is hashed and written once into
    the vector (no whole-vector buffer or copy)."""
    if header.words > max_words:
        raise StreamError(f"a check step of {header.words} words is longer than {max_words}")
    out = np.empty(int(header.words), dtype="<i8")
    view, digest, at = memoryview(out).cast("B"), hashlib.sha256(), 0
    for msg in rest:
        if msg.WhichOneof("part") != "data":
            raise StreamError("a check step carries a second header")
        if at + len(msg.data) > len(view):
            raise StreamError(f"a check step is longer than the {header.words} words its header declares")
        view[at : at + len(msg.data)] = msg.data
        digest.update(msg.data)
        at += len(msg.data)
    if at != len(view) or digest.hexdigest() != header.content_sha256:
        raise StreamError("a check step's bytes do not match its header")
    return out.astype(np.int64, copy=False)


def max_step_words(cfg: PartyConfig) -> int:
    """The longest step vector accepted: `MAX_STEP_WORDS`, or one item's 3·m + 5 words at the
    largest model when that is longer."""
    return max(MAX_STEP_WORDS, 3 * cfg.limits.max_model_params + 5)


STEPS_PER_PART = 6
"""Step numbers one vectorised check may use (two attempts of three steps)."""


def run_parts(
    party: int,
    held: list[HeldInput],
    bounds: CheckBounds,
    seeds: list[bytes],
    exchange: Callable[[int, np.ndarray], np.ndarray],
    correlation: DealerCorrelation,
    done: Callable[[int], None] = lambda part: None,
) -> list[Verdict]:
    """`check_batch` over the parts `batch_sizes` cuts the batch into, part c using the step
    numbers 6c..6c+5 of `exchange`; `done(c)` after each part."""
    verdicts: list[Verdict] = []
    for part, size in enumerate(batch_sizes(len(held), bounds)):
        at, base = len(verdicts), STEPS_PER_PART * part
        verdicts += check_batch(
            party,
            held[at : at + size],
            bounds,
            seeds[at : at + size],
            lambda step, mine, base=base: exchange(base + step, mine),
            correlation,
        )
        done(part)
    return verdicts


# ---------------------------------------------------------------------------- party0
def new_batch_id(scope: str) -> str:
    """A fresh batch (and dealer session) id: letters, digits, '.', '-'."""
    return f"check-{scope}.{int(time.time())}-{os.urandom(4).hex()}"


class LeaderBatch:
    """party0's side of one batch (module docstring, steps 1–4)."""

    def __init__(
        self,
        cfg: PartyConfig,
        store: Store,
        peer: PeerClient,
        round_index: int,
        items: list[Item],
        label: str = "",
        shares: OpenRoundShares | None = None,
    ):
        self.cfg, self.store, self.peer, self.shares = cfg, store, peer, shares
        self.peer_bytes = 0  #: step-vector bytes exchanged with party1 (both directions)
        self.round_index, self.items = round_index, items
        self.batch_id = new_batch_id(label or f"r{round_index}")
        self.seed = secrets.token_bytes(SEED_BYTES)

    def _exchange(self, step: int, mine: np.ndarray) -> np.ndarray:
        """One CheckStep call: party0's vector of `step` (every item's) out, party1's back."""
        header = peer_pb2.CheckStepHeader(batch_id=self.batch_id, step=step)
        reply = self.peer.stream_stream("CheckStep", lambda: step_messages(header, mine, self.cfg.limits.chunk_bytes))
        try:
            theirs_header, theirs = read_step(iter(reply), max_step_words(self.cfg))
        except StreamError as exc:
            raise CheckFailed(f"party1's step {step} of batch {self.batch_id}: {exc}") from None
        if theirs_header.step != step:
            raise CheckFailed(f"party1 answered step {step} of batch {self.batch_id} with another step")
        self.peer_bytes += 8 * (mine.size + theirs.size)
        return theirs

    def _start(self, bounds: CheckBounds) -> None:
        request = peer_pb2.CheckStart(
            batch_id=self.batch_id,
            seed=self.seed,
            round=self.round_index,
            items=[peer_pb2.CheckItem(client_id=i.client_id, task_id=i.task_id) for i in self.items],
            dealer_identity=self.cfg.jobs.dealer_identity,
            max_norm=bounds.max_norm,
        )
        self.peer.unary("StartCheck", request)

    def run(self, bounds: CheckBounds) -> dict[Item, Verdict]:
        """Check every item; {item: verdict}, equal on both parties (else CheckFailed). party0
        reads its shares on a thread while party1 starts the batch and the dealer link opens."""
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="check-load") as pool:
            loading = pool.submit(
                lambda: [held_input(self.store, self.round_index, item, self.shares) for item in self.items]
            )
            return self._run(bounds, loading)

    def _run(self, bounds: CheckBounds, loading: Future) -> dict[Item, Verdict]:
        start = time.monotonic()
        try:
            self._start(bounds)
        except PeerRefused as exc:
            if exc.code is None or exc.code.name != "ABORTED":
                raise  # party1's configuration or store refuses the batch: the caller fails the round
            raise CheckFailed(f"party1 did not start check batch {self.batch_id}: {exc}") from None
        try:
            link = open_link(self.cfg, self.batch_id)
            try:
                mine = self._check_all(link, bounds, loading.result())
            finally:
                link.close()
            theirs = self.peer.unary("FinishCheck", peer_pb2.CheckRef(batch_id=self.batch_id))
        except DealerError as exc:
            raise CheckFailed(f"the dealer failed check batch {self.batch_id}: {exc}", "dealer") from None
        except OSError as exc:
            if classify(exc) is not None:
                raise  # party0 cannot write its store now: the coordinator's storage-fault path retries
            raise CheckFailed(f"party0 could not run check batch {self.batch_id}: {exc}", "party0") from None
        except PeerRefused as exc:
            raise CheckFailed(f"party1 ended check batch {self.batch_id}: {exc}") from None
        agreed = {Item(v.client_id, v.task_id): tuple(v.failed) for v in theirs.verdicts}
        if agreed != {item: v.failed for item, v in mine.items()}:
            raise CheckFailed(f"check batch {self.batch_id}: the two parties' verdicts differ")
        log.info(
            "check batch %s: %d items, %d refused, %.2f s",
            self.batch_id,
            len(mine),
            sum(not v.accepted for v in mine.values()),
            time.monotonic() - start,
        )
        return mine

    def _check_all(self, link: DealerLink, bounds: CheckBounds, held: list[HeldInput]) -> dict[Item, Verdict]:
        seeds = [client_seed(self.seed, item.client_id) for item in self.items]
        verdicts = run_parts(0, held, bounds, seeds, self._exchange, DealerCorrelation(link))
        return dict(zip(self.items, verdicts, strict=True))


def lead_task_check(
    cfg: PartyConfig, store: Store, peer: PeerClient, tasks: dict[str, str], deadline: float
) -> dict[str, Verdict]:
    """party0: check one job step's task answers (client → task id) with party1; {client:
    verdict}. A batch that fails is retried with a new one until `deadline` (then CheckFailed)."""
    bounds = check_bounds(cfg, store.global_model(0).params.size)
    items = [Item(client, task) for client, task in sorted(tasks.items())]
    while True:
        try:
            verdicts = LeaderBatch(cfg, store, peer, 0, items, label="tasks").run(bounds)
        except CheckFailed as exc:
            metrics.check_batch("failed")
            if time.time() + cfg.rounds.peer_retry_s >= deadline:
                raise
            log.warning("task answer check failed: %s; retrying", exc)
            time.sleep(cfg.rounds.peer_retry_s)
            continue
        metrics.check_batch("completed")
        return {item.client_id: verdict for item, verdict in verdicts.items()}
