"""TLS 1.3 with mutual authentication for every MPC-plane connection.

Both ends present a certificate signed by the deployment's CA (`TlsFiles.ca`) and each
checks that the other's common name is the identity it was configured to expect
(`require_identity`): party0 ↔ party1 expect each other's names, the dealer expects
party0 and party1, the parties expect the dealer's name. A certificate from another CA,
an expired one, or one naming another identity is refused with `PeerRefused`, whose
message says which of these happened. Nothing below TLS 1.3 is negotiated.
"""

from __future__ import annotations

import hashlib
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path


class PeerRefused(ConnectionError):
    """A peer failed authentication (certificate chain, validity or identity) or refused us."""


@dataclass(frozen=True)
class TlsFiles:
    """This process's certificate and key, and the CA its peers' certificates must chain to."""

    ca: Path
    cert: Path
    key: Path

    def check(self) -> None:
        for what, path in (("CA certificate", self.ca), ("certificate", self.cert), ("private key", self.key)):
            if not Path(path).is_file():
                raise FileNotFoundError(f"TLS {what} {path} does not exist (create it with `starfish certs`)")


def _context(files: TlsFiles, purpose: ssl._SSLMethod) -> ssl.SSLContext:
    files.check()
    ctx = ssl.SSLContext(purpose)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_verify_locations(cafile=str(files.ca))
    ctx.load_cert_chain(certfile=str(files.cert), keyfile=str(files.key))
    return ctx


def server_context(files: TlsFiles) -> ssl.SSLContext:
    """For a listener: requires and verifies the connecting peer's certificate."""
    return _context(files, ssl.PROTOCOL_TLS_SERVER)


def client_context(files: TlsFiles) -> ssl.SSLContext:
    """For a connecting side. The host name is not matched: the peer is identified by its
    certificate's common name (`require_identity`), whatever address it is reached at."""
    ctx = _context(files, ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def peer_identity(sock: ssl.SSLSocket) -> str:
    """The common name of the (verified) peer certificate."""
    cert = sock.getpeercert()
    for rdn in (cert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return ""


def peer_fingerprint(sock: ssl.SSLSocket) -> str:
    """sha256 of the peer certificate (DER), hex: names exactly which certificate was used."""
    der = sock.getpeercert(binary_form=True)
    return hashlib.sha256(der or b"").hexdigest()


def require_identity(sock: ssl.SSLSocket, expected: str | tuple[str, ...], where: str) -> str:
    """Return the peer's identity, or close the socket and raise `PeerRefused`."""
    allowed = (expected,) if isinstance(expected, str) else expected
    name = peer_identity(sock)
    if name not in allowed:
        sock.close()
        want = " or ".join(repr(a) for a in allowed)
        raise PeerRefused(f"{where}: the peer's certificate names {name!r}, but {want} is configured")
    return name


def describe(exc: BaseException) -> str:
    """A one-line reason for a failed handshake (chain, expiry, alert from the peer)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"certificate rejected: {exc.verify_message}"
    if isinstance(exc, ssl.SSLError):
        reason = exc.reason or str(exc)
        return f"TLS refused: {reason.lower().replace('_', ' ')}"
    return str(exc) or type(exc).__name__


def wrap(ctx: ssl.SSLContext, conn: socket.socket, timeout_s: float, server_side: bool) -> ssl.SSLSocket:
    """TLS handshake on a connected socket, bounded by `timeout_s`; a refusal closes it."""
    conn.settimeout(timeout_s)
    try:
        return ctx.wrap_socket(conn, server_side=server_side)
    except (ssl.SSLError, OSError) as exc:
        conn.close()
        raise PeerRefused(describe(exc)) from None
