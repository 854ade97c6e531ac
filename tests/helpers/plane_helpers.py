"""Certificates and in-process endpoints for the MPC-plane tests (loopback, free ports).

`Pki.make(root)` issues two independent CAs: `good` (party0, party1, dealer, and an
expired party1 certificate `party1-expired`) and `rogue` (the same names, another CA).
`pair(...)` connects party 0 and party 1 in two threads of this process and returns
both ends' results; `both(f0, f1)` runs two callables concurrently.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mpc.plane.certificate_authority import issue_cert, make_certs
from mpc.plane.rendezvous import PeerListener, connect_peer
from mpc.plane.tls import TlsFiles, client_context, server_context

HOST = "127.0.0.1"


@dataclass(frozen=True)
class Pki:
    good: Path
    rogue: Path

    @classmethod
    def make(cls, root: Path) -> Pki:
        good, rogue = root / "good", root / "rogue"
        make_certs(good)
        make_certs(rogue)
        cert, key = issue_cert(good, "party1", not_before=dt.datetime.now(dt.UTC) - dt.timedelta(days=3), valid_days=1)
        cert.rename(good / "party1-expired.pem")
        key.rename(good / "party1-expired.key")
        issue_cert(good, "party1")  # the valid party1 certificate again
        return cls(good, rogue)

    def files(self, name: str, ca: str = "good", issuer: str = "good") -> TlsFiles:
        """`name`'s certificate from `issuer`, trusting the CA of `ca`."""
        d, c = getattr(self, issuer), getattr(self, ca)
        return TlsFiles(c / "ca.pem", d / f"{name}.pem", d / f"{name}.key")


def both(f0: Callable[[], Any], f1: Callable[[], Any], timeout: float = 60.0) -> tuple[Any, Any]:
    """Run f0 and f1 concurrently; return both results or raise the first error."""
    out: dict[int, Any] = {}
    errors: dict[int, BaseException] = {}

    def run(i: int, f: Callable[[], Any]) -> None:
        try:
            out[i] = f()
        except BaseException as exc:  # re-raised below
            errors[i] = exc

    threads = [threading.Thread(target=run, args=(i, f), daemon=True) for i, f in enumerate((f0, f1))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    if any(t.is_alive() for t in threads):
        raise TimeoutError("a party did not finish")
    if errors:
        raise errors[min(errors)]
    return out[0], out[1]


def pair(
    p0: TlsFiles | None,
    p1: TlsFiles | None,
    session: str = "t.1",
    sessions: tuple[str, str] | None = None,
    timeout_s: float = 10.0,
    expect0: str = "party1",
    expect1: str = "party0",
) -> tuple[Any, Any]:
    """party 0 listens (with p0), party 1 connects (with p1); returns both channels."""
    listener = PeerListener(HOST, 0, server_context(p0) if p0 else None)
    s0, s1 = sessions or (session, session)
    return both(
        lambda: listener.accept_peer(s0, expect0 if p0 else "", timeout_s),
        lambda: connect_peer(
            HOST, listener.port, client_context(p1) if p1 else None, expect1 if p1 else "", s1, timeout_s
        ),
        timeout=timeout_s + 5,
    )
