"""gRPC channel options shared by every caller of the wire contract (SDK and parties)."""

from __future__ import annotations

MAX_RECONNECT_BACKOFF_MS = 1000
"""gRPC's reconnect back-off grows to 120 s by default, so a channel to a party that was down
for a while would stay idle long after the party is back; a refused TCP connect costs nothing,
so a channel tries again at least once a second."""


def reconnect_options() -> list[tuple[str, object]]:
    """Channel options: reconnect back-off from 200 ms, capped at MAX_RECONNECT_BACKOFF_MS."""
    return [
        ("grpc.initial_reconnect_backoff_ms", 200),
        ("grpc.min_reconnect_backoff_ms", 200),
        ("grpc.max_reconnect_backoff_ms", MAX_RECONNECT_BACKOFF_MS),
    ]
