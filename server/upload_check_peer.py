"""Input validation, party1's side: the batches party0 leads (server.upload_check) and the
verdicts party1 saw (docs/SERVICE.md, "Input validation").

party1 never takes a bound from party0: it checks every item against its own
`[validation]` bounds and refuses a batch whose announced bound differs. A batch runs in a
thread of its own: it joins the batch's dealer session as rank 1 while it reads the items'
shares (an upload's from the open round's shares in memory, server.open_round_shares, when
held there; StartCheck only checks that every item is held) and runs `check_batch`
over all items at once (`run_parts`); each CheckStep call hands it party0's vector of a
step and returns party1's vector of the same step, full duplex (party1's goes out as soon
as it is computed, while party0's is still arriving). Its verdicts are written durably
(`VerdictLog`, fsynced, atomically replaced) before FinishCheck answers, and
AgreeMembership admits only members that party1 saw pass.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from mpc.durable import atomic_write, private_dir
from mpc.input_check import SEED_BYTES, CheckBounds, HeldInput, Verdict, client_seed
from mpc.plane.rendezvous import check_session_id
from proto.starfish.v1 import peer_pb2
from proto.wire import split_header
from server import metrics
from server.store import Store
from server.upload_check import (
    STEPS_PER_PART,
    DealerCorrelation,
    Item,
    check_bounds,
    held_input,
    holds,
    max_step_words,
    open_link,
    read_step_body,
    run_parts,
    step_messages,
)

if TYPE_CHECKING:
    from server.party_state import PartyState

log = logging.getLogger(__name__)
POLL_S = 0.05  #: how often party1 looks for the verdicts a job step waits for
MAX_BATCHES = 4  #: batches kept at once; the oldest finished or stale one is dropped first


class VerdictLog:
    """The verdicts party1 saw, per scope ("round-<i>" or "job-<id>"): one JSON file each."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._lock = threading.Lock()

    def _path(self, scope: str) -> Path:
        return self.root / f"{check_session_id(scope)}.json"

    def read(self, scope: str) -> dict[str, list[str]]:
        """{item key: failed checks} of the scope ({} when none was recorded)."""
        path = self._path(scope)
        return json.loads(path.read_text()) if path.exists() else {}

    def record(self, scope: str, verdicts: dict[str, list[str]]) -> None:
        """Merge `verdicts` into the scope's file (written to a temporary file, fsynced, renamed)."""
        with self._lock:
            merged = self.read(scope) | verdicts
            private_dir(self.root)
            atomic_write(self._path(scope), json.dumps(merged, sort_keys=True).encode())

    def passed(self, scope: str, key: str) -> bool:
        return self.read(scope).get(key) == []


def item_key(item: Item) -> str:
    """How a verdict is filed: the client of an upload, the task id of a task answer."""
    return item.task_id or item.client_id


class FollowerBatch:
    """One batch on party1 (module docstring)."""

    def __init__(
        self,
        request: peer_pb2.CheckStart,
        bounds: CheckBounds,
        held: Callable[[Item], HeldInput],
        open_link: Callable[[], object],
        timeout_s: float,
    ) -> None:
        self.batch_id, self.round_index = request.batch_id, request.round
        self.seed = bytes(request.seed)
        self.items = [Item(i.client_id, i.task_id) for i in request.items]
        self.bounds, self.held, self.open_link, self.timeout_s = bounds, held, open_link, timeout_s
        self.cond = threading.Condition()
        self.received: dict[int, np.ndarray] = {}
        self.sent: dict[int, np.ndarray] = {}
        self.verdicts: dict[Item, Verdict] = {}
        self.error = ""
        self.done = False
        self.started = time.monotonic()
        self.thread = threading.Thread(target=self._run, name=f"check-{self.batch_id}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            with ThreadPoolExecutor(max_workers=1, thread_name_prefix="check-load") as pool:
                loading = pool.submit(lambda: [self.held(item) for item in self.items])
                link = self.open_link()  # joined while the shares are read
            try:
                held = loading.result()
                seeds = [client_seed(self.seed, item.client_id) for item in self.items]
                verdicts = run_parts(1, held, self.bounds, seeds, self._exchange, DealerCorrelation(link), self._forget)
                with self.cond:
                    self.verdicts = dict(zip(self.items, verdicts, strict=True))
            finally:
                link.close()
        except Exception as exc:  # reported to party0 by the next call; nothing is decided
            log.warning("check batch %s failed on party1: %s", self.batch_id, exc)
            self.error = f"party1's check batch {self.batch_id} failed: {exc}"
        finally:
            with self.cond:
                self.done = True
                self.cond.notify_all()

    def _exchange(self, step: int, mine: np.ndarray) -> np.ndarray:
        with self.cond:
            self.sent[step] = mine
            self.cond.notify_all()
            if not self.cond.wait_for(lambda: step in self.received, self.timeout_s):
                raise TimeoutError(f"party0 sent no step {step} of batch {self.batch_id} within {self.timeout_s} s")
            return self.received[step]

    def _forget(self, part: int) -> None:
        """Part `part` is decided and party0 moved on: only its last (small) answers may be
        asked again; its large step-0 vectors are dropped."""
        first = STEPS_PER_PART * part
        with self.cond:
            self.received = {k: v for k, v in self.received.items() if k >= first + STEPS_PER_PART}
            for step in (first, first + 3):
                self.sent.pop(step, None)

    def receive(self, step: int, theirs: np.ndarray) -> None:
        """party0's vector of `step` in."""
        with self.cond:
            self.received[step] = theirs
            self.cond.notify_all()

    def mine(self, step: int) -> np.ndarray:
        """party1's vector of `step` once computed (RuntimeError when the batch failed or timed
        out). A repeated call returns the same vector."""
        with self.cond:
            self.cond.wait_for(lambda: step in self.sent or self.done, self.timeout_s)
            if step in self.sent:
                return self.sent[step]
            raise RuntimeError(self.error or f"party1 reached no step {step} in batch {self.batch_id}")

    def finish(self) -> dict[Item, Verdict]:
        """Wait for the batch to end; every item's verdict (RuntimeError when it failed)."""
        self.thread.join(self.timeout_s)
        if self.thread.is_alive() or self.error or len(self.verdicts) != len(self.items):
            raise RuntimeError(self.error or f"party1's check batch {self.batch_id} did not complete")
        return self.verdicts

    def stale(self) -> bool:
        return self.done or time.monotonic() - self.started > 4 * self.timeout_s


class FollowerChecks:
    """party1's running batches, by batch id."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._batches: dict[str, FollowerBatch] = {}

    def start(self, batch_id: str, make: Callable[[], FollowerBatch]) -> None:
        """Start a batch (a repeated StartCheck of a running batch changes nothing)."""
        with self._lock:
            if batch_id in self._batches:
                return
            for old in [b for b, batch in self._batches.items() if batch.stale()]:
                del self._batches[old]
            if len(self._batches) >= MAX_BATCHES:
                raise RuntimeError(f"party1 runs {MAX_BATCHES} check batches already; retry later")
            self._batches[batch_id] = make()

    def get(self, batch_id: str) -> FollowerBatch:
        with self._lock:
            batch = self._batches.get(batch_id)
        if batch is None:
            raise KeyError(f"no check batch {batch_id!r} runs on party1")
        return batch

    def end(self, batch_id: str) -> None:
        with self._lock:
            self._batches.pop(batch_id, None)


# ---------------------------------------------------------------------------- the handlers
class CheckRefused(ValueError):
    """party1 refuses a StartCheck (the message says why)."""


def scope_of(store: Store, round_index: int, item: Item) -> str:
    """The `VerdictLog` scope of an item: its round's, or its task's job's."""
    task = store.task(item.task_id) if item.task_id else None
    return f"round-{round_index}" if task is None else f"job-{task.job_id}"


def await_task_verdicts(state: PartyState, job_id: str, tasks: dict[str, str], timeout_s: float) -> dict[str, Verdict]:
    """party1: the verdicts on one job step's answers (client → task id) once party0's batch
    recorded them here (TimeoutError when it does not within `timeout_s`)."""
    end = time.monotonic() + timeout_s
    while True:
        seen = state.verdicts.read(f"job-{job_id}")
        if all(t in seen for t in tasks.values()):
            return {client: Verdict(tuple(seen[task])) for client, task in tasks.items()}
        if time.monotonic() > end or state.stopping.is_set():
            raise TimeoutError(f"party0 did not check the answers to {sorted(tasks.values())} within {timeout_s:g} s")
        time.sleep(POLL_S)


def _refusal(state: PartyState, request: peer_pb2.CheckStart, bounds: CheckBounds) -> str | None:
    cfg = state.config
    if not cfg.validation.enabled:
        return f"party{cfg.role} has input validation off ([validation] enabled = false or no [jobs] dealer)"
    if request.dealer_identity != cfg.jobs.dealer_identity:
        return f"party0 uses dealer {request.dealer_identity!r}, this party trusts {cfg.jobs.dealer_identity!r}"
    if request.max_norm != bounds.max_norm:
        return (
            f"party0 checks against max_norm {request.max_norm!r}, "
            f"this party's [validation] bound is {bounds.max_norm!r}"
        )
    if len(request.seed) != SEED_BYTES:
        return f"a batch seed has {SEED_BYTES} bytes, got {len(request.seed)}"
    clients = [i.client_id for i in request.items]
    if not clients or len(set(clients)) != len(clients):
        return "a batch names each client once, and at least one"
    return None


def start(state: PartyState, request: peer_pb2.CheckStart) -> None:
    """StartCheck on party1: refuse (CheckRefused: this party's configuration or store says
    no) or start the batch (module docstring)."""
    cfg, store = state.config, state.store
    try:
        check_session_id(request.batch_id)
        bounds = check_bounds(cfg, store.global_model(0).params.size)
    except (ValueError, LookupError) as exc:
        raise CheckRefused(str(exc)) from None
    refusal = _refusal(state, request, bounds)
    if refusal is not None:
        raise CheckRefused(refusal)
    items = [Item(entry.client_id, entry.task_id) for entry in request.items]
    missing = [item_key(item) for item in items if not holds(store, request.round, item)]
    if missing:
        raise CheckRefused(f"party{cfg.role} holds no such item: {', '.join(missing)}")

    def held(item: Item) -> HeldInput:
        return held_input(store, request.round, item, state.open_shares)

    state.checks.start(  # RuntimeError when party1 runs too many batches (party0 retries)
        request.batch_id,
        lambda: FollowerBatch(
            request, bounds, held, lambda: open_link(cfg, request.batch_id), cfg.jobs.session_timeout_s
        ),
    )
    log.info("check batch %s: %d items, started by party0", request.batch_id, len(items))


def step(state: PartyState, request_iterator) -> Iterator[peer_pb2.CheckChunk]:
    """CheckStep on party1, full duplex: party0's vector is read on a thread of its own while
    party1's vector of the same step goes out as soon as it is computed (its step never
    depends on party0's vector of that step), so the two transfers overlap. StreamError,
    KeyError or RuntimeError when it cannot answer (the header's before the first chunk)."""
    header, rest = split_header(request_iterator, "a check step")
    batch = state.checks.get(header.batch_id)
    failure: list[BaseException] = []

    def read() -> None:
        try:
            batch.receive(header.step, read_step_body(header, rest, max_step_words(state.config)))
        except Exception as exc:  # raised to party0 once party1's vector is out
            failure.append(exc)

    reader = threading.Thread(target=read, name=f"check-step-{header.step}", daemon=True)
    reader.start()
    out = peer_pb2.CheckStepHeader(batch_id=header.batch_id, step=header.step)
    return _reply(step_messages(out, batch.mine(header.step), state.config.limits.chunk_bytes), reader, failure)


def _reply(messages: Iterator, reader: threading.Thread, failure: list[BaseException]) -> Iterator:
    """party1's chunks, then the end of the reader (its error, if party0's vector was bad)."""
    yield from messages
    reader.join()
    if failure:
        raise failure[0]


def finish(state: PartyState, request: peer_pb2.CheckRef) -> peer_pb2.CheckVerdicts:
    """FinishCheck on party1: the batch's verdicts, recorded durably first, then logged."""
    batch = state.checks.get(request.batch_id)
    try:
        verdicts = batch.finish()
    finally:
        state.checks.end(request.batch_id)
    round_index = batch.round_index
    by_scope: dict[str, dict[str, list[str]]] = {}
    for item, verdict in verdicts.items():
        by_scope.setdefault(scope_of(state.store, round_index, item), {})[item_key(item)] = list(verdict.failed)
    for scope, entries in by_scope.items():
        state.verdicts.record(scope, entries)
    for item, verdict in verdicts.items():
        if not verdict.accepted:
            metrics.input_refused("task" if item.task_id else "round", verdict.failed)
            log.warning("check batch %s: %s refused: %s", request.batch_id, item_key(item), verdict.reason())
    return peer_pb2.CheckVerdicts(
        batch_id=request.batch_id,
        verdicts=[
            peer_pb2.CheckVerdict(client_id=i.client_id, task_id=i.task_id, failed=list(v.failed))
            for i, v in verdicts.items()
        ],
    )
