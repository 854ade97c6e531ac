"""gRPC channel options shared by every caller of the wire contract (SDK and parties)."""

from __future__ import annotations


def reconnect_options(max_backoff_s: float) -> list[tuple[str, object]]:
    """Cap gRPC's reconnect back-off (it grows to 120 s by default, so a channel to a party that
    was down for a while would stay idle long after the party is back)."""
    return [
        ("grpc.initial_reconnect_backoff_ms", 200),
        ("grpc.min_reconnect_backoff_ms", 200),
        ("grpc.max_reconnect_backoff_ms", int(1000 * max_backoff_s)),
    ]
