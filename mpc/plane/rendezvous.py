"""How party 1 and party 0 (and a party and the dealer) find and authenticate each other.

party 0 listens on the configured address (`PeerListener`; never another interface) for
ONE session; party 1 connects twice (`connect_peer`), once per lane (see
`mpc.plane.channel`). On every connection, after the TLS handshake and the identity check
(`mpc.plane.tls`), the connecting side sends a hello

    {"plane": "starfish-mpc/1", "session": "<job id>.<attempt>", "rank": r, "lane": ...}

and the listening side answers {"ok": true} or an error frame. A connection that fails
TLS, names another identity or another session is refused and logged; party 0 keeps
listening until its peer's two lanes are in or the session timeout passes, then closes
the listener. Without TLS (`ctx=None`, loopback benchmarks only) the session id is the
only check.
"""

from __future__ import annotations

import errno
import logging
import re
import socket
import ssl
import time
from typing import Any

from mpc.plane.channel import Channel, ChannelClosed, ChannelTimeout, RemoteError
from mpc.plane.tls import PeerRefused, peer_identity, require_identity, wrap

log = logging.getLogger(__name__)
PLANE_VERSION = "starfish-mpc/1"
SESSION_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
"""A session id names one job attempt (`<job id>.<attempt>`) and appears in logs."""
LANES = ("to0", "to1")
"""Lane names, by receiving party: party 1 writes "to0" and reads "to1"."""
HANDSHAKE_TIMEOUT_S = 10.0
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
        sock.listen(8)
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


def read_hello(sock: socket.socket, timeout_s: float, peer: str) -> tuple[Channel, dict[str, Any]]:
    """Read the hello a connecting peer sends first (bounded by `timeout_s`)."""
    link = Channel(sock, timeout_s, peer)
    hello = link.recv_json()
    if hello.get("plane") != PLANE_VERSION:
        link.send_error(f"unsupported plane version {hello.get('plane')!r}; this side speaks {PLANE_VERSION}")
        link.close()
        raise RendezvousError(f"{peer} speaks {hello.get('plane')!r}, not {PLANE_VERSION}")
    return link, hello


class PeerListener:
    """party 0's listener for one session; `accept_peer` returns the two-lane channel."""

    def __init__(self, host: str, port: int, ctx: ssl.SSLContext | None) -> None:
        self.host = host
        self.ctx = ctx
        self.sock = bind(host, port)
        self.port = int(self.sock.getsockname()[1])

    def accept_peer(self, session_id: str, expect: str, timeout_s: float) -> Channel:
        deadline = time.monotonic() + timeout_s
        lanes: dict[str, socket.socket] = {}
        try:
            while len(lanes) < 2:
                conn = self._accept_one(session_id, expect, deadline)
                if conn is not None:
                    lane, sock = conn
                    if lane in lanes:
                        lanes[lane].close()  # a reconnect of the same lane replaces it
                    lanes[lane] = sock
        except BaseException:
            for s in lanes.values():
                s.close()
            raise
        finally:
            self.close()
        return Channel(lanes["to0"], timeout_s, expect or "party1", outgoing=lanes["to1"])

    def _accept_one(self, session_id: str, expect: str, deadline: float) -> tuple[str, socket.socket] | None:
        """One connection: TLS, identity, hello. A refused peer is told why, logged, and
        the listener goes on waiting for the real one."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise RendezvousError(f"party 1 did not join session {session_id} on {self.host}:{self.port} in time")
        self.sock.settimeout(remaining)
        try:
            raw, addr = self.sock.accept()
        except TimeoutError:
            return None
        where = f"connection from {addr[0]}:{addr[1]}"
        wait = min(HANDSHAKE_TIMEOUT_S, remaining)
        try:
            sock = raw if self.ctx is None else wrap(self.ctx, raw, wait, server_side=True)
            name = peer_identity(sock) if self.ctx is not None else expect  # type: ignore[arg-type]
            link, hello = read_hello(sock, wait, where)
        except (ConnectionError, TimeoutError, OSError) as exc:
            log.warning("MPC listener refused a %s: %s", where, exc)
            return None
        problem = ""
        if name != expect:
            problem = f"this listener accepts only {expect!r}; the certificate names {name!r}"
        elif hello.get("session") != session_id or hello.get("rank") != 1 or hello.get("lane") not in LANES:
            problem = f"this listener serves session {session_id} to party 1 only"
        if problem:
            link.send_error(problem)
            link.close()
            log.warning("MPC listener refused a %s: %s", where, problem)
            return None
        link.send_json({"ok": True, "rank": 0})
        return str(hello["lane"]), sock

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
