"""Authentication of every RPC.

Clients send `x-starfish-client` and `x-starfish-token`; the admin sends
`x-starfish-admin-token`. Tokens are compared by their sha256 digest in constant time.
Peer calls are authenticated by mutual TLS: the caller's certificate common name must
be the other party's. Failures abort the call with UNAUTHENTICATED / PERMISSION_DENIED
and never echo the token.
"""

from __future__ import annotations

import hmac

import grpc

from server.config import PartyConfig, token_digest

CLIENT_ID_KEY = "x-starfish-client"
CLIENT_TOKEN_KEY = "x-starfish-token"
ADMIN_TOKEN_KEY = "x-starfish-admin-token"


def _metadata(context: grpc.ServicerContext) -> dict[str, str]:
    return {k: v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}


def verified_client(cfg: PartyConfig, metadata) -> str | None:
    """The client id whose token `metadata` carries correctly, else None (no abort: admission
    control uses it to count a call against the right client before the handler runs)."""
    md = {k: v for k, v in (metadata or ()) if isinstance(v, str)}
    client, token = md.get(CLIENT_ID_KEY), md.get(CLIENT_TOKEN_KEY)
    expected = cfg.clients.get(client or "")
    if expected is None or not token or not hmac.compare_digest(expected, token_digest(token)):
        return None
    return client


def has_admin_token(cfg: PartyConfig, metadata) -> bool:
    """Whether `metadata` carries the configured admin token."""
    token = {k: v for k, v in (metadata or ()) if isinstance(v, str)}.get(ADMIN_TOKEN_KEY)
    return bool(cfg.admin_token_sha256 and token and hmac.compare_digest(cfg.admin_token_sha256, token_digest(token)))


def authenticate_client(cfg: PartyConfig, context: grpc.ServicerContext) -> str:
    """Return the authenticated client id, or abort the call."""
    md = _metadata(context)
    client, token = md.get(CLIENT_ID_KEY), md.get(CLIENT_TOKEN_KEY)
    if not client or not token:
        context.abort(
            grpc.StatusCode.UNAUTHENTICATED, "missing client credentials (x-starfish-client / x-starfish-token)"
        )
    expected = cfg.clients.get(client)
    if expected is None:
        context.abort(grpc.StatusCode.UNAUTHENTICATED, f"unknown client {client!r}")
    if not hmac.compare_digest(expected, token_digest(token)):
        context.abort(grpc.StatusCode.UNAUTHENTICATED, f"wrong credential for client {client!r}")
    return client


def require_admin(cfg: PartyConfig, context: grpc.ServicerContext) -> None:
    token = _metadata(context).get(ADMIN_TOKEN_KEY)
    if not cfg.admin_token_sha256:
        context.abort(grpc.StatusCode.PERMISSION_DENIED, "no admin credential is configured on this party")
    if not token or not hmac.compare_digest(cfg.admin_token_sha256, token_digest(token)):
        context.abort(grpc.StatusCode.PERMISSION_DENIED, "admin credential missing or wrong")


def require_peer(cfg: PartyConfig, context: grpc.ServicerContext) -> None:
    names = context.auth_context().get("x509_common_name", [])
    if cfg.tls.peer_name.encode() not in names:
        context.abort(
            grpc.StatusCode.PERMISSION_DENIED,
            f"peer call must come from {cfg.tls.peer_name!r} (mutual TLS certificate)",
        )
