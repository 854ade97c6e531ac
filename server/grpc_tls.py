"""gRPC TLS credentials of a party.

* client/admin port: server-side TLS (clients verify the party against the CA) and
  per-call tokens;
* peer port: mutual TLS; the caller must present a certificate signed by the CA whose
  common name is the other party's name (checked in `server.auth.require_peer`);
* both ports accept TLS 1.3 only (`server.tls_floor`), and a party serves only with a
  certificate that names its own role (`check_own_certificate`).
"""

from __future__ import annotations

import grpc
from cryptography import x509
from cryptography.x509.oid import NameOID

from server.config import PartyConfig


class CertificateRoleError(OSError):
    """This party's TLS certificate names another identity than its role."""


def check_own_certificate(cfg: PartyConfig) -> None:
    """Refuse to serve with a certificate whose common name is not `party<role>` (e.g. party0
    started with party1's files would answer the peer port as the other party)."""
    cert = x509.load_pem_x509_certificate(_read(cfg.tls.cert))
    names = [a.value for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    if names != [cfg.name]:
        raise CertificateRoleError(
            f"tls.cert {cfg.tls.cert} names {', '.join(map(repr, names)) or 'no one'}, but this is "
            f"{cfg.name} (role = {cfg.role}): a party serves only with its own certificate"
        )


def _read(path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError as exc:
        raise FileNotFoundError(f"TLS file {path} does not exist (run `starfish certs`)") from exc


def client_port_credentials(cfg: PartyConfig) -> grpc.ServerCredentials:
    return grpc.ssl_server_credentials(
        [(_read(cfg.tls.key), _read(cfg.tls.cert))], root_certificates=None, require_client_auth=False
    )


def peer_port_credentials(cfg: PartyConfig) -> grpc.ServerCredentials:
    return grpc.ssl_server_credentials(
        [(_read(cfg.tls.key), _read(cfg.tls.cert))], root_certificates=_read(cfg.tls.ca), require_client_auth=True
    )


def peer_channel_credentials(cfg: PartyConfig) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(
        root_certificates=_read(cfg.tls.ca), private_key=_read(cfg.tls.key), certificate_chain=_read(cfg.tls.cert)
    )


RECONNECT_BACKOFF_MS = (500, 2000)
"""First and longest wait before a broken channel dials again. gRPC's default grows to 120 s,
so after a link outage of half a minute the peer channel stayed down ~25 s after the link
came back; capped at 2 s, a job resumes within seconds of the link's return."""


def channel_options(max_message_bytes: int, server_name: str | None = None) -> list[tuple[str, object]]:
    """Message-size caps (both directions), the reconnect back-off cap and, for certificates
    issued to a party name, the TLS name to verify instead of the dialled host."""
    opts: list[tuple[str, object]] = [
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.initial_reconnect_backoff_ms", RECONNECT_BACKOFF_MS[0]),
        ("grpc.min_reconnect_backoff_ms", RECONNECT_BACKOFF_MS[0]),
        ("grpc.max_reconnect_backoff_ms", RECONNECT_BACKOFF_MS[1]),
    ]
    if server_name:
        opts.append(("grpc.ssl_target_name_override", server_name))
    return opts
