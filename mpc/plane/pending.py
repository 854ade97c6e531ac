"""Unauthenticated connections of a raw TCP listener, bounded per source and in time.

A connection is *pending* from `accept` until it has finished the TLS handshake (the peer's
certificate verified against the CA) and sent its hello. Pending connections cost a thread
and a slot, and a peer that connects and stays silent would otherwise hold them until its
handshake timed out. So (`PendingConnections`):

* a pending connection older than `timeout_s` is closed (`sweep`, run by the accept loop
  at least once a second): the bound on the whole handshake, however slowly bytes trickle;
* at most `per_source` pending connections per source address and `total` of all sources:
  a new connection beyond either bound closes the *oldest* pending one (of that source,
  resp. of all), never the new one. A silent or slow peer therefore cannot keep a
  legitimate party out: the party's fresh connection always gets a slot and its
  handshake takes milliseconds, while the idle ones are pushed out.

Authenticated connections (and failed ones, whose thread ends) leave the table
(`authenticated`) and are bounded by the service's own session limits.
"""

from __future__ import annotations

import collections
import logging
import socket
import threading
import time

log = logging.getLogger(__name__)


class PendingConnections:
    def __init__(self, timeout_s: float, per_source: int, total: int, what: str) -> None:
        self.timeout_s = timeout_s
        self.per_source = per_source
        self.total = total
        self.what = what  #: the listener's name in log lines
        self._lock = threading.Lock()
        #: connection -> (source, accept time, a duplicate of its socket): the duplicate stays
        #: valid when TLS takes the original over, and keeps its descriptor from being reused
        self._pending: collections.OrderedDict[socket.socket, tuple[str, float, socket.socket]] = (
            collections.OrderedDict()
        )
        self.closed = 0  #: pending connections closed by a bound (time or count)

    def add(self, conn: socket.socket, source: str) -> None:
        """Admit a fresh connection, closing the oldest pending ones beyond the bounds."""
        with self._lock:
            mine = [c for c, (s, _, _) in self._pending.items() if s == source]
            while len(mine) >= self.per_source:
                self._close(mine.pop(0), f"more than {self.per_source} unauthenticated connections from it")
            while len(self._pending) >= self.total:
                self._close(next(iter(self._pending)), f"more than {self.total} unauthenticated connections")
            self._pending[conn] = (source, time.monotonic(), conn.dup())

    def authenticated(self, conn: socket.socket) -> None:
        """The connection finished TLS and its hello: no longer bounded here."""
        with self._lock:
            entry = self._pending.pop(conn, None)
        if entry is not None:
            entry[2].close()

    def sweep(self) -> None:
        """Close every pending connection older than the handshake bound."""
        cutoff = time.monotonic() - self.timeout_s
        with self._lock:
            for conn, (_, since, _) in list(self._pending.items()):
                if since > cutoff:
                    break  # insertion order is age order
                self._close(conn, f"no TLS handshake and hello within {self.timeout_s:g} s")

    def close_all(self) -> None:
        """Close every connection still pending (the listener is done)."""
        with self._lock:
            for conn in list(self._pending):
                self._close(conn, "the listener closed")

    def count(self) -> int:
        with self._lock:
            return len(self._pending)

    def _close(self, conn: socket.socket, why: str) -> None:
        """Drop `conn` (lock held): shutting it down ends its handshake in its own thread."""
        source, _, dup = self._pending.pop(conn)
        self.closed += 1
        log.info("%s: closed an unauthenticated connection from %s: %s", self.what, source, why)
        try:
            dup.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        finally:
            dup.close()
