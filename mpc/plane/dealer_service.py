"""The dealer service: correlated randomness for many two-party sessions, long-lived.

Run by the third operator (`starfish dealer --config dealer.toml`). It listens on its
configured address only, accepts TLS 1.3 connections from the two configured party
identities only, and serves one MPC session per job attempt:

0. a party may check that the service is up: it connects (TLS, both certificates checked)
   and says hello {"ping": true}; the dealer answers {"ok": true} and closes;
1. a party connects and says hello {"session": "<job id>.<attempt>", "rank": r}; its
   certificate must name the identity configured for rank r;
2. when both ranks of the session have joined (within `join_timeout_s`), the dealer
   draws one fresh 32-byte key per party from the OS CSPRNG and sends each party its
   own key (`mpc.plane.prg`); party 1 then disconnects — it expands its key locally;
3. party 0 sends requests ({"kind", "shapes"}, `mpc.plane.dealer_ops`) and receives its
   share V_0 of each correlated value, until it says {"bye": true} or disconnects.

Unauthenticated connections (before TLS and the hello are through) are bounded per source
and in time (`handshake_timeout_s`, `max_unauthenticated[_per_source]`; mpc.plane.pending):
a silent or slow client cannot keep a party out. Bounds: at most `max_sessions` sessions
at once (further hellos are refused with a reason), at most `max_request_elements` per
tensor, an idle session (no request for `idle_timeout_s`) is closed, and a session id
that has run cannot be joined again (the last `remember_sessions` ids are kept) — a
retried job attempt uses a new id. A session
whose party dies or misbehaves is dropped with all its state; other sessions are not
affected. The dealer never receives a data share; it logs session ids, identities,
request kinds and sizes, never keys.
"""

from __future__ import annotations

import collections
import logging
import os
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from mpc.plane.channel import Channel, RemoteError
from mpc.plane.dealer_ops import RequestError, parse
from mpc.plane.fixed_masks import MaskStackCache
from mpc.plane.pending import PendingConnections
from mpc.plane.prg import Prg, new_key
from mpc.plane.rendezvous import bind, check_session_id, read_hello
from mpc.plane.tls import PeerRefused, TlsFiles, peer_identity, server_context, wrap

log = logging.getLogger(__name__)
SWEEP_S = 1.0  #: the accept loop closes overdue unauthenticated connections at least this often


@dataclass(frozen=True)
class DealerLimits:
    max_sessions: int = 16  #: sessions served at once
    join_timeout_s: float = 120.0  #: how long the first party of a session waits for the second
    idle_timeout_s: float = 600.0  #: a session with no request for this long is closed
    max_request_elements: int = 1 << 25  #: per tensor of one request (2^25 int64 = 256 MiB)
    remember_sessions: int = 4096  #: finished session ids kept to refuse a second run
    handshake_timeout_s: float = 5.0  #: TLS handshake and hello of a new connection, at most
    max_unauthenticated: int = 64  #: connections not yet through TLS and hello (a new one closes the oldest)
    max_unauthenticated_per_source: int = 8  #: the same, per source address

    def __post_init__(self) -> None:
        for name in (
            "max_sessions",
            "max_request_elements",
            "remember_sessions",
            "max_unauthenticated",
            "max_unauthenticated_per_source",
        ):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"limits.{name} must be a positive integer")
        for name in ("join_timeout_s", "idle_timeout_s", "handshake_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"limits.{name} must be positive")


@dataclass(frozen=True)
class DealerConfig:
    host: str
    port: int
    tls: TlsFiles | None  #: None: plaintext, loopback benchmarks only
    parties: tuple[str, str] = ("party0", "party1")  #: certificate identities of rank 0 and rank 1
    limits: DealerLimits = field(default_factory=DealerLimits)
    metrics_listen: str = ""  #: Prometheus endpoint ("" = none; mpc.plane.dealer_metrics)
    health_listen: str = ""  #: gRPC health service ("" = none; mpc.plane.dealer_health)


class DealerSession:
    """One session's state: the two parties' keys, the dealer's copies of their streams and
    the last stack of fixed masks it rebuilt (`fixed_masks.MaskStackCache`, dropped at the end)."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.keys = (new_key(), new_key())
        self.prgs = (Prg(self.keys[0]), Prg(self.keys[1]))
        self.fixed_masks = MaskStackCache()
        self.joined: dict[int, str] = {}
        self.ready = threading.Condition()
        self.requests = 0
        self.elements = 0
        self.started = time.time()


class SessionTable:
    """Running sessions and recently finished ids, under one lock."""

    def __init__(self, limits: DealerLimits) -> None:
        self.limits = limits
        self.lock = threading.Lock()
        self.running: dict[str, DealerSession] = {}
        self.finished: collections.OrderedDict[str, str] = collections.OrderedDict()

    def join(self, session_id: str, rank: int, identity: str) -> DealerSession:
        with self.lock:
            if session_id in self.finished:
                raise PeerRefused(f"session {session_id} already ran ({self.finished[session_id]}); use a new id")
            session = self.running.get(session_id)
            if session is None:
                if len(self.running) >= self.limits.max_sessions:
                    raise PeerRefused(f"the dealer serves {self.limits.max_sessions} sessions already; retry later")
                session = self.running[session_id] = DealerSession(session_id)
            if rank in session.joined:
                raise PeerRefused(f"party {rank} already joined session {session_id}")
            session.joined[rank] = identity
        with session.ready:
            session.ready.notify_all()
        return session

    def end(self, session: DealerSession, outcome: str) -> None:
        with self.lock:
            if self.running.get(session.session_id) is session:
                del self.running[session.session_id]
                self.finished[session.session_id] = outcome
                while len(self.finished) > self.limits.remember_sessions:
                    self.finished.popitem(last=False)
        session.fixed_masks.clear()
        with session.ready:
            session.ready.notify_all()

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {"running": sorted(self.running), "finished": dict(self.finished)}


class DealerService:
    """The listener and one thread per connection (see the module doc)."""

    def __init__(self, config: DealerConfig) -> None:
        self.config = config
        self.sessions = SessionTable(config.limits)
        self._ctx: ssl.SSLContext | None = None
        self._ctx_stamp: tuple[float, ...] = ()
        self._stop = threading.Event()
        self._conns: set[socket.socket] = set()
        self._conns_lock = threading.Lock()
        lim = config.limits
        self.pending = PendingConnections(
            lim.handshake_timeout_s, lim.max_unauthenticated_per_source, lim.max_unauthenticated, "dealer"
        )
        self._sessions_conns = 0  #: authenticated connections (bounded by 2 per session + 4)
        self.sock = bind(config.host, config.port)
        self.port = int(self.sock.getsockname()[1])
        self._thread = threading.Thread(target=self._accept_loop, name="dealer-accept", daemon=True)

    def start(self) -> DealerService:
        self._thread.start()
        log.info("dealer listening on %s:%d for %s", self.config.host, self.port, " and ".join(self.config.parties))
        return self

    def stop(self) -> None:
        self._stop.set()
        self.sock.close()
        with self._conns_lock:
            for conn in list(self._conns):
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    # ---------------------------------------------------------------- accepting
    def _context(self) -> ssl.SSLContext | None:
        """The TLS context, rebuilt when a certificate file changes (rotation without restart)."""
        tls = self.config.tls
        if tls is None:
            return None
        stamp = tuple(os.stat(p).st_mtime_ns for p in (tls.ca, tls.cert, tls.key))
        if stamp != self._ctx_stamp:
            self._ctx, self._ctx_stamp = server_context(tls), stamp
        return self._ctx

    def _accept_loop(self) -> None:
        """Accept, admitting each connection as pending (mpc.plane.pending); once a second at
        least, close pending connections past the handshake bound."""
        self.sock.settimeout(SWEEP_S)
        while not self._stop.is_set():
            self.pending.sweep()
            try:
                conn, addr = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed by stop()
            with self._conns_lock:
                self._conns.add(conn)
            self.pending.add(conn, str(addr[0]))
            threading.Thread(
                target=self._serve, args=(conn, addr), name=f"dealer-{addr[0]}:{addr[1]}", daemon=True
            ).start()

    def _handshake(self, raw: socket.socket, where: str) -> tuple[Channel, dict[str, Any], str]:
        """TLS, the peer's identity and its hello, within `handshake_timeout_s`."""
        wait = self.config.limits.handshake_timeout_s
        ctx = self._context()
        sock = raw if ctx is None else wrap(ctx, raw, wait, server_side=True)
        identity = peer_identity(sock) if ctx is not None else ""  # type: ignore[arg-type]
        link, hello = read_hello(sock, wait, f"{identity or 'peer'} at {where}")
        return link, hello, identity

    def _serve(self, raw: socket.socket, addr: tuple[Any, ...]) -> None:
        where = f"{addr[0]}:{addr[1]}"
        counted = False
        try:
            link, hello, identity = self._handshake(raw, where)
            self.pending.authenticated(raw)
            if hello.get("ping") is True:  # a party checking that the dealer is up (dealer_client.ping)
                link.send_json({"ok": True})
                log.debug("dealer: %s at %s checked the service is up", identity or "peer", where)
                return
            with self._conns_lock:
                counted = self._sessions_conns < 2 * self.config.limits.max_sessions + 4
                self._sessions_conns += counted
            if not counted:
                link.send_error(f"the dealer serves {self.config.limits.max_sessions} sessions already; retry later")
                return
            self._session(link, hello, identity, where)
        except (ConnectionError, TimeoutError, OSError, ValueError) as exc:
            log.warning("dealer: connection from %s ended: %s", where, exc)
        except Exception:  # a bug in one session must not take the service down
            log.exception("dealer: connection from %s failed", where)
        finally:
            self.pending.authenticated(raw)  # no longer pending, whatever happened
            with self._conns_lock:
                self._conns.discard(raw)
                self._sessions_conns -= counted
            raw.close()

    # ---------------------------------------------------------------- one session
    def _admit(self, link: Channel, hello: dict[str, Any], identity: str) -> tuple[DealerSession, int]:
        rank = hello.get("rank")
        try:
            session_id = check_session_id(hello.get("session"))  # type: ignore[arg-type]
            if rank not in (0, 1):
                raise PeerRefused(f"rank must be 0 or 1, got {rank!r}")
            if self.config.tls is not None and identity != self.config.parties[rank]:
                raise PeerRefused(
                    f"certificate {identity!r} may not join as party {rank} (configured: {self.config.parties[rank]!r})"
                )
            return self.sessions.join(session_id, rank, identity), rank
        except (PeerRefused, ValueError) as exc:
            link.send_error(str(exc))
            link.close()
            raise PeerRefused(str(exc)) from None

    def _session(self, link: Channel, hello: dict[str, Any], identity: str, where: str) -> None:
        session, rank = self._admit(link, hello, identity)
        sid = session.session_id
        log.info("dealer: %s at %s joined session %s as party %d", identity or "peer", where, sid, rank)
        outcome = "aborted"
        try:
            if not self._await_both(session):
                link.send_error(
                    f"party {1 - rank} did not join session {sid} within {self.config.limits.join_timeout_s} s"
                )
                return
            link.send_json({"ok": True, "key": session.keys[rank].hex()})
            if rank == 1:
                outcome = ""
                return
            outcome = self._serve_requests(link, session)
        finally:
            if rank == 0 or outcome == "aborted":
                self.sessions.end(session, outcome or "aborted")
                log.info(
                    "dealer: session %s %s after %d requests (%d elements)",
                    sid,
                    outcome or "aborted",
                    session.requests,
                    session.elements,
                )
            link.close()

    def _await_both(self, session: DealerSession) -> bool:
        deadline = time.monotonic() + self.config.limits.join_timeout_s
        with session.ready:
            while len(session.joined) < 2:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._stop.is_set():
                    return False
                if self.sessions.running.get(session.session_id) is not session:
                    return False  # ended by the other side's failure
                session.ready.wait(min(remaining, 1.0))
        return True

    def _serve_requests(self, link: Channel, session: DealerSession) -> str:
        link.timeout_s = self.config.limits.idle_timeout_s
        link.sock.settimeout(self.config.limits.idle_timeout_s)
        prg0, prg1 = session.prgs
        while True:
            try:
                message = link.recv_json()
            except RemoteError as exc:
                log.warning("dealer: party 0 of session %s gave up: %s", session.session_id, exc)
                return "aborted"
            if message.get("bye") is True:
                link.send_json({"ok": True})
                return "finished"
            try:
                op, request = parse(message, self.config.limits.max_request_elements)
            except RequestError as exc:
                link.send_error(str(exc))
                return "refused a request"
            share0 = op.dealer_share0(prg0, prg1, request, session.fixed_masks)
            session.requests += 1
            session.elements += share0.numel()
            link.send_tensor(share0)
