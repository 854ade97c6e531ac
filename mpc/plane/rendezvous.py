"""How party 1 and party 0 (and a party and the dealer) find and authenticate each other.

party 0 listens on the configured address (`PeerListener`; never another interface) for
ONE session; party 1 connects twice (`connect_peer`), once per lane (see
`mpc.plane.channel`). On every connection, after the TLS handshake and the identity check
(`mpc.plane.tls`), the connecting side sends a hello

    {"plane": "starfish-mpc/1", "session": "<job id>.<attempt>", "rank": r, "lane": ...}

and the listening side answers {"ok": true} or an error frame. A connection that fails
TLS, names another identity or another session is refused and logged; party 0 keeps
listening until its peer's two lanes are in or the session timeout passes, then closes
the listener. Handshakes run concurrently, and unauthenticated connections are bounded per
source and in time (mpc.plane.pending), so silent connections cannot keep party 1 out.
`ping` checks that a service (the dealer) is up with a real TLS hello. Without TLS
(`ctx=None`, loopback benchmarks only) the session id is the only check.
"""

from __future__ import annotations

import errno
import logging
import re
import socket
import ssl
import threading
import time
from typing import Any

from mpc.plane.channel import Channel, ChannelClosed, ChannelTimeout, RemoteError
from mpc.plane.pending import PendingConnections
from mpc.plane.tls import PeerRefused, peer_identity, require_identity, wrap

log = logging.getLogger(__name__)
PLANE_VERSION = "starfish-mpc/1"
SESSION_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
"""A session id names one job attempt (`<job id>.<attempt>`) and appears in logs."""
LANES = ("to0", "to1")
"""Lane names, by receiving party: party 1 writes "to0" and reads "to1"."""
HANDSHAKE_TIMEOUT_S = 10.0
ACCEPT_POLL_S = 0.05  #: the listener looks at its lanes and overdue handshakes this often
PENDING_PER_SOURCE = 8  #: unauthenticated connections kept per source (older ones are closed)
PENDING_TOTAL = 32  #: the same over all sources
LISTEN_BACKLOG = 128  #: connections the kernel queues until the accept loop takes them
RETRY_S = 0.1
RETRY_ERRNOS = {errno.ECONNREFUSED, errno.ECONNRESET, errno.EHOSTUNREACH, errno.ENETUNREACH, errno.ETIMEDOUT}


class RendezvousError(ConnectionError):
    """The peer did not come, or came with the wrong session."""


def check_session_id(session_id: str) -> str:
    if not isinstance(session_id, str) or not SESSION_ID_RE.match(session_id):
        raise ValueError(f"invalid session id {session_id!r}: letters, digits and _.:- (at most 128)")
    return session_id


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket bound to exactly `host:port` (port 0: the OS picks one)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, _, _, _, address = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(LISTEN_BACKLOG)
    except OSError:
        sock.close()
        raise
    return sock


def connect(
    host: str, port: int, ctx: ssl.SSLContext | None, expect: str, deadline: float, where: str
) -> socket.socket:
    """TCP connect (retrying while nobody listens, until `deadline`), then TLS and the
    identity check. A refused certificate is not retried."""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise RendezvousError(f"{where} at {host}:{port} did not accept a connection in time")
        try:
            raw = socket.create_connection((host, port), timeout=min(remaining, HANDSHAKE_TIMEOUT_S))
            break
        except OSError as exc:  # nobody listens yet, or the link is down: retry until the deadline
            if not isinstance(exc, TimeoutError) and exc.errno not in RETRY_ERRNOS:
                raise RendezvousError(f"cannot reach {where} at {host}:{port}: {exc}") from None
            time.sleep(min(RETRY_S, max(0.0, deadline - time.monotonic())))
    if ctx is None:
        return raw
    sock = wrap(ctx, raw, min(HANDSHAKE_TIMEOUT_S, max(0.1, deadline - time.monotonic())), server_side=False)
    require_identity(sock, expect, where)
    return sock


def say_hello(sock: socket.socket, timeout_s: float, peer: str, hello: dict[str, Any]) -> dict[str, Any]:
    """Send our hello on a fresh connection and return the peer's answer (raises if refused)."""
    link = Channel(sock, timeout_s, peer)
    try:
        link.send_json({"plane": PLANE_VERSION, **hello})
        answer = link.recv_json()
    except RemoteError as exc:
        sock.close()
        raise PeerRefused(str(exc)) from None
    except ChannelTimeout:
        sock.close()
        raise
    except ChannelClosed as exc:
        sock.close()
        raise PeerRefused(
            f"{peer} closed the connection before answering ({exc}): it most likely refused this "
            "process's certificate (another CA, expired, or an identity it does not accept) — see its log"
        ) from None
    if answer.get("ok") is not True:
        sock.close()
        raise PeerRefused(f"{peer} did not accept the connection: {answer}")
    return answer


def ping(host: str, port: int, ctx: ssl.SSLContext | None, expect: str, timeout_s: float, where: str) -> None:
    """Check that a service (the dealer) answers: TLS with both certificates checked, a hello
    {"ping": true} and its {"ok": true}; raises ConnectionError (PeerRefused) otherwise. A
    bare TCP probe would end in a failed TLS handshake that the service logs as refused."""
    sock = connect(host, port, ctx, expect, time.monotonic() + timeout_s, where)
    try:
        say_hello(sock, timeout_s, f"{where} at {host}:{port}", {"ping": True})
    finally:
        sock.close()


def read_hello(sock: socket.socket, timeout_s: float, peer: str) -> tuple[Channel, dict[str, Any]]:
    """Read the hello a connecting peer sends first (bounded by `timeout_s`)."""
    link = Channel(sock, timeout_s, peer)
    hello = link.recv_json()
    if hello.get("plane") != PLANE_VERSION:
        link.send_error(f"unsupported plane version {hello.get('plane')!r}; this side speaks {PLANE_VERSION}")
        link.close()
        raise RendezvousError(f"{peer} speaks {hello.get('plane')!r}, not {PLANE_VERSION}")
    return link, hello


class _Lanes:
    """The lanes party 1 has opened so far, filled by the handshake threads."""

    def __init__(self, session_id: str, expect: str, ctx: ssl.SSLContext | None) -> None:
        self.session_id, self.expect, self.ctx = session_id, expect, ctx
        self.lock = threading.Lock()
        self.lanes: dict[str, socket.socket] = {}

    def complete(self) -> bool:
        with self.lock:
            return len(self.lanes) == 2

    def admit(self, raw: socket.socket, where: str, deadline: float, pending: PendingConnections) -> None:
        """One connection: TLS, identity, hello. A refused peer is told why and logged."""
        wait = max(0.1, min(HANDSHAKE_TIMEOUT_S, deadline - time.monotonic()))
        try:
            sock = raw if self.ctx is None else wrap(self.ctx, raw, wait, server_side=True)
            name = peer_identity(sock) if self.ctx is not None else self.expect  # type: ignore[arg-type]
            link, hello = read_hello(sock, wait, where)
        except (ConnectionError, TimeoutError, OSError) as exc:
            log.warning("MPC listener refused a %s: %s", where, exc)
            return
        finally:
            pending.authenticated(raw)
        problem = ""
        if name != self.expect:
            problem = f"this listener accepts only {self.expect!r}; the certificate names {name!r}"
        elif hello.get("session") != self.session_id or hello.get("rank") != 1 or hello.get("lane") not in LANES:
            problem = f"this listener serves session {self.session_id} to party 1 only"
        if problem:
            link.send_error(problem)
            link.close()
            log.warning("MPC listener refused a %s: %s", where, problem)
            return
        self._keep(str(hello["lane"]), sock, link)

    def _keep(self, lane: str, sock: socket.socket, link: Channel) -> None:
        with self.lock:
            if len(self.lanes) == 2:  # complete already: a late duplicate
                link.close()
                return
            link.send_json({"ok": True, "rank": 0})
            old = self.lanes.get(lane)
            self.lanes[lane] = sock  # a reconnect of the same lane replaces it
        if old is not None:
            old.close()

    def channel(self, timeout_s: float) -> Channel:
        return Channel(self.lanes["to0"], timeout_s, self.expect or "party1", outgoing=self.lanes["to1"])

    def close(self) -> None:
        with self.lock:
            for s in self.lanes.values():
                s.close()
            self.lanes.clear()


class PeerListener:
    """party 0's listener for one session; `accept_peer` returns the two-lane channel."""

    def __init__(self, host: str, port: int, ctx: ssl.SSLContext | None) -> None:
        self.host = host
        self.ctx = ctx
        self.sock = bind(host, port)
        self.port = int(self.sock.getsockname()[1])

    def accept_peer(self, session_id: str, expect: str, timeout_s: float) -> Channel:
        """Accept until party 1's two lanes are in. Each connection's TLS handshake and hello
        run in a thread of their own, bounded per source and in time (mpc.plane.pending): a
        silent connection neither delays the next one nor keeps party 1 out."""
        deadline = time.monotonic() + timeout_s
        gate = _Lanes(session_id, expect, self.ctx)
        pending = PendingConnections(
            min(HANDSHAKE_TIMEOUT_S, timeout_s), PENDING_PER_SOURCE, PENDING_TOTAL, "MPC listener"
        )
        self.sock.settimeout(ACCEPT_POLL_S)
        try:
            while not gate.complete():
                if time.monotonic() >= deadline:
                    raise RendezvousError(
                        f"party 1 did not join session {session_id} on {self.host}:{self.port} in time"
                    )
                pending.sweep()
                try:
                    raw, addr = self.sock.accept()
                except TimeoutError:
                    continue
                pending.add(raw, str(addr[0]))
                args = (raw, f"connection from {addr[0]}:{addr[1]}", deadline, pending)
                threading.Thread(target=gate.admit, args=args, name="mpc-listener-handshake", daemon=True).start()
        except BaseException:
            gate.close()
            raise
        finally:
            pending.close_all()
            self.close()
        return gate.channel(timeout_s)

    def close(self) -> None:
        self.sock.close()


def connect_peer(
    host: str, port: int, ctx: ssl.SSLContext | None, expect: str, session_id: str, timeout_s: float
) -> Channel:
    """party 1: open both lanes to party 0's listener; returns the two-lane channel."""
    deadline = time.monotonic() + timeout_s
    lanes: dict[str, socket.socket] = {}
    try:
        for lane in LANES:
            sock = connect(host, port, ctx, expect, deadline, f"party 0 ({expect or 'no TLS'})")
            lanes[lane] = sock
            say_hello(sock, timeout_s, expect or "party0", {"session": session_id, "rank": 1, "lane": lane})
    except BaseException:
        for s in lanes.values():
            s.close()
        raise
    return Channel(lanes["to1"], timeout_s, expect or "party0", outgoing=lanes["to0"])
