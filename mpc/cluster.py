"""Run a function on both parties of a real 2PC setting (dealer service + 2 party processes).

For tests, benchmarks and job workers that need a CrypTen computation without the full
service. Everything runs on 127.0.0.1: a dealer service process and two party processes,
on the TLS plane with certificates made for the cluster in a temporary directory (or,
for measurements, `ClusterConfig.transport` "tcp" / "gloo"). Processes are started with
multiprocessing's "spawn" method, so the function must be defined at module level
(importable by the children) and its arguments and results must be picklable (they only
travel over local pipes between our own processes, never over the network).

One-shot:

    r0, r1 = run_two_party(fn, (x, y), timeout=60)

runs `fn(backend, rank, x, y)` in party 0 and party 1 (each with an open session and a
`CrypTenBackend`) and returns both results. Long-lived (process start costs ≈ 2 s):

    with TwoPartyCluster(timeout=60) as cluster:
        for case in cases:
            r0, r1 = cluster.run(fn, case)

keeps the dealer and both parties up between calls; each call starts with a fresh
transcript (lock-step check) and a fresh cost ledger (`backend.ledger`). Errors: if a party raises, the call
raises `TwoPartyError` with each failing party's traceback text in `.errors`; if the call
exceeds `timeout`, `TwoPartyError` says so. After an error the cluster restarts its
processes (in a new session) at the next call. Processes are always reaped on `close()`.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import shutil
import tempfile
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from mpc.costs import CostLedger
from mpc.fixedpoint import DEFAULT_PRECISION_BITS
from mpc.plane.tls import TlsFiles
from mpc.ports import free_port

T = TypeVar("T")
PartyFn = Callable[..., Any]
"""fn(backend: CrypTenBackend, rank: int, *args) -> picklable result."""

_CTX = mp.get_context("spawn")
_JOIN_GRACE_S = 5.0
_PARENT_POLL_S = 1.0
HOST = "127.0.0.1"


class TwoPartyError(RuntimeError):
    """A two-party call failed; `.errors` maps rank -> traceback text."""

    def __init__(self, message: str, errors: dict[int, str] | None = None) -> None:
        self.errors = errors or {}
        details = "".join(f"\n--- party {r} ---\n{t}" for r, t in sorted(self.errors.items()))
        super().__init__(message + details)


@dataclass(frozen=True)
class ClusterConfig:
    """Settings shared by the three processes of a local cluster."""

    precision_bits: int = DEFAULT_PRECISION_BITS
    session_timeout_s: float = 60.0
    step_check: str = "op"
    start_timeout_s: float = 180.0
    start_attempts: int = 3
    """A start can fail on a loaded machine (or a gloo port taken meanwhile): retry."""
    transport: str = "tls"
    """"tls" (as deployed); "tcp" / "gloo": unencrypted, to measure what TLS costs."""
    dealer_idle_timeout_s: float = 600.0
    """The dealer closes the cluster's session after this long without a request (at least
    `session_timeout_s`); a cluster kept across a long test run sets it higher."""
    backend_options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class _Plan:
    """Where the three processes meet (sent to each child)."""

    session_id: str
    dealer_port: int
    gloo_port: int
    certs: str  # directory with ca.pem and party0/party1/dealer certificates

    def tls(self, name: str) -> TlsFiles | None:
        d = Path(self.certs)
        return TlsFiles(d / "ca.pem", d / f"{name}.pem", d / f"{name}.key")


# ------------------------------------------------------------------------- child processes
def _fast_exit(code: int, results: Any = None) -> None:
    """Flush our queue, then skip the interpreter's slow torch finalisation."""
    if results is not None:
        results.close()
        results.join_thread()
    os._exit(code)


def _dealer_main(certs: str, cfg: ClusterConfig, ports: Any, stop: Any) -> None:
    """A dealer service on a free loopback port until told to stop or orphaned."""
    parent = os.getppid()
    from mpc.plane.dealer_service import DealerConfig, DealerLimits, DealerService

    d = Path(certs)
    tls = TlsFiles(d / "ca.pem", d / "dealer.pem", d / "dealer.key") if cfg.transport == "tls" else None
    idle_s = max(cfg.dealer_idle_timeout_s, cfg.session_timeout_s)
    limits = DealerLimits(join_timeout_s=cfg.start_timeout_s, idle_timeout_s=idle_s)
    try:
        service = DealerService(DealerConfig(HOST, 0, tls, limits=limits)).start()
    except BaseException:
        traceback.print_exc()
        _fast_exit(1)
    ports.put(service.port)
    while not stop.wait(_PARENT_POLL_S):
        if os.getppid() != parent:
            break
    service.stop()
    _fast_exit(0)


def _next_task(tasks: Any, parent: int) -> Any:
    """The next task, or None once told to stop or once the parent process has died
    (an orphaned party would otherwise wait on its queue for ever)."""
    while True:
        try:
            return tasks.get(timeout=_PARENT_POLL_S)
        except queue.Empty:
            if os.getppid() != parent:
                return None


def _open_session(rank: int, plan: _Plan, cfg: ClusterConfig, tasks: Any, results: Any, parent: int) -> Any:
    """Open this party's session: party 0 announces its port, party 1 waits for it."""
    from mpc.session import Endpoint, Session, SessionConfig

    if rank == 0:
        port = plan.gloo_port if cfg.transport == "gloo" else 0
    else:
        port = _next_task(tasks, parent)
        if port is None:
            _fast_exit(3, results)
    session = Session(
        SessionConfig(
            rank=rank,
            session_id=plan.session_id,
            peer=Endpoint(HOST, port),
            dealer=Endpoint(HOST, plan.dealer_port),
            tls=plan.tls(f"party{rank}") if cfg.transport == "tls" else None,
            transport=cfg.transport,
            precision_bits=cfg.precision_bits,
            timeout_s=cfg.session_timeout_s,
        )
    )
    if rank == 0:
        results.put((0, "listening", session.listen()))
    session.open()
    return session


def _party_main(rank: int, plan: _Plan, cfg: ClusterConfig, tasks: Any, results: Any) -> None:
    """Open a session, then run tasks until told to stop (None) or a task fails."""
    parent = os.getppid()
    from mpc.crypten_backend import CrypTenBackend

    session = None
    try:
        session = _open_session(rank, plan, cfg, tasks, results, parent)
        backend = CrypTenBackend(precision_bits=cfg.precision_bits, step_check=cfg.step_check, **cfg.backend_options)
    except BaseException:
        results.put((rank, "error", traceback.format_exc()))
        if session is not None:
            session.close(force=True)
        _fast_exit(1, results)
    results.put((rank, "ready", None))
    failed = False
    while True:
        task = _next_task(tasks, parent)
        if task is None:
            break
        fn, args = task
        backend.reset_transcript()
        backend.ledger = CostLedger()
        try:
            results.put((rank, "ok", fn(backend, rank, *args)))
        except BaseException:
            results.put((rank, "error", traceback.format_exc()))
            failed = True
            break
    try:
        session.close(force=failed)
    except BaseException:
        traceback.print_exc()
        _fast_exit(1, results)
    _fast_exit(0, results)


# ------------------------------------------------------------------------- parent side
class TwoPartyCluster:
    """Dealer + party 0 + party 1 kept running; feed them many calls (see module doc)."""

    def __init__(self, timeout: float = 120.0, config: ClusterConfig | None = None) -> None:
        self.timeout = timeout
        self.config = config or ClusterConfig()
        self._procs: list[Any] = []
        self._tasks: list[Any] = []
        self._results: Any = None
        self._stop: Any = None
        self._certs = ""
        self.port: int | None = None

    # lifecycle
    def start(self) -> TwoPartyCluster:
        """Start dealer and parties and wait until both parties have joined the session."""
        if self._procs:
            return self
        for attempt in range(1, self.config.start_attempts + 1):
            try:
                self._spawn()
                self._collect("ready", self.config.start_timeout_s)
                return self
            except TwoPartyError:
                self.close()
                if attempt == self.config.start_attempts:
                    raise
        return self

    def _spawn(self) -> None:
        from mpc.plane.certificate_authority import make_certs

        self._certs = tempfile.mkdtemp(prefix="starfish-cluster-")
        make_certs(Path(self._certs), hosts=("localhost",))
        self._results = _CTX.Queue()
        self._tasks = [_CTX.Queue(), _CTX.Queue()]
        self._stop = _CTX.Event()
        ports = _CTX.Queue()
        dealer = _CTX.Process(
            target=_dealer_main, args=(self._certs, self.config, ports, self._stop), name="mpc-dealer", daemon=True
        )
        self._procs = [dealer]
        dealer.start()
        try:
            dealer_port = ports.get(timeout=self.config.start_timeout_s)
        except queue.Empty:
            raise TwoPartyError(f"the dealer service did not start (exit code {dealer.exitcode})") from None
        finally:
            ports.close()
        gloo_port = free_port() if self.config.transport == "gloo" else 0
        plan = _Plan(f"cluster-{uuid.uuid4().hex[:12]}.1", dealer_port, gloo_port, self._certs)
        self.port = gloo_port or None
        for r in (0, 1):
            party = _CTX.Process(
                target=_party_main,
                args=(r, plan, self.config, self._tasks[r], self._results),
                name=f"mpc-party{r}",
                daemon=True,
            )
            self._procs.append(party)
            party.start()

    def close(self) -> None:
        """Stop the parties (graceful goodbye to the dealer), then the dealer; reap everything."""
        if not self._procs:
            return
        for q in self._tasks:
            try:
                q.put(None)
            except (OSError, ValueError):
                pass
        deadline = time.monotonic() + _JOIN_GRACE_S
        for p in self._procs[1:]:
            p.join(max(0.0, deadline - time.monotonic()))
        self._stop.set()
        self._procs[0].join(max(0.0, deadline - time.monotonic()) + _PARENT_POLL_S)
        for p in self._procs:
            if p.is_alive():
                p.kill()
                p.join(_JOIN_GRACE_S)
        for q in [*self._tasks, self._results]:
            q.close()
            q.join_thread()
        self._procs, self._tasks, self._results = [], [], None
        shutil.rmtree(self._certs, ignore_errors=True)

    @property
    def pids(self) -> dict[str, int]:
        """Process ids of the running dealer and parties (e.g. for CPU accounting)."""
        return {p.name.removeprefix("mpc-"): p.pid for p in self._procs if p.pid is not None}

    def __enter__(self) -> TwoPartyCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # calls
    def run(self, fn: PartyFn, *args: Any, timeout: float | None = None) -> tuple[Any, Any]:
        """Run fn(backend, rank, *args) on both parties; return (result0, result1)."""
        self.start()
        for q in self._tasks:
            q.put((fn, args))
        try:
            out = self._collect("ok", self.timeout if timeout is None else timeout)
        except TwoPartyError:
            self.close()
            raise
        return out[0], out[1]

    def _collect(self, expect: str, timeout: float) -> dict[int, Any]:
        deadline = time.monotonic() + timeout
        got: dict[int, Any] = {}
        errors: dict[int, str] = {}
        while len(got) + len(errors) < 2:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.close()
                raise TwoPartyError(f"two-party call did not finish within {timeout:.1f} s", errors)
            try:
                rank, kind, value = self._results.get(timeout=min(remaining, 0.5))
            except queue.Empty:
                for r in (0, 1):
                    proc = self._procs[1 + r]
                    if not proc.is_alive() and r not in got and r not in errors:
                        errors[r] = f"party process exited with code {proc.exitcode} without a result"
                        deadline = min(deadline, time.monotonic() + self.config.session_timeout_s + _JOIN_GRACE_S)
                continue
            if kind == "listening":  # party 0's port: party 1 connects there
                self._tasks[1].put(value)
                continue
            if kind == "error":
                errors[rank] = value
                if rank not in got:
                    # the peer will fail or hang on its next message; do not wait for it forever
                    deadline = min(deadline, time.monotonic() + self.config.session_timeout_s + _JOIN_GRACE_S)
            elif kind == expect:
                got[rank] = value
        if errors:
            self.close()
            raise TwoPartyError("two-party call failed", errors)
        return got


def run_two_party(
    fn: PartyFn, args: tuple[Any, ...] = (), *, timeout: float = 120.0, config: ClusterConfig | None = None
) -> tuple[Any, Any]:
    """One-shot: start dealer + two parties, run fn(backend, rank, *args) once, tear down."""
    cluster = TwoPartyCluster(timeout=timeout, config=config)
    try:
        return cluster.run(fn, *args)
    finally:
        cluster.close()
