"""A TLS handshake with a client held to one protocol version, against a deployment's CA."""

from __future__ import annotations

import socket
import ssl

from harness.local import LocalDeployment


def negotiated_version(dep: LocalDeployment, address: str, version: ssl.TLSVersion, cert: str | None = None) -> str:
    """Handshake with `address` ("host:port") offering only `version` (and, with `cert`, that
    identity's client certificate from the deployment); returns the negotiated version."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ctx.maximum_version = version
    ctx.load_verify_locations(dep.ca_cert)
    ctx.check_hostname = False
    ctx.set_alpn_protocols(["h2"])
    if cert:
        ctx.load_cert_chain(dep.root / "certs" / f"{cert}.pem", dep.root / "certs" / f"{cert}.key")
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as raw, ctx.wrap_socket(raw) as tls:
        return str(tls.version())
