"""The leader's client of the follower's peer service (mutual TLS, retries with back-off).

Transient failures are retried with doubling back-off until `stop` is set: UNAVAILABLE and
DEADLINE_EXCEEDED (the follower is down, restarting, or cannot write its store now) and
RESOURCE_EXHAUSTED with the `x-starfish-busy` key (its disk is full: server.storage_faults).
Every other status is raised as PeerRefused — the follower refuses this step — and stops
the caller's step. `recovered_at` is when a call last succeeded after a failed one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import grpc

from proto.channel_options import reconnect_options
from proto.starfish.v1 import peer_pb2_grpc
from server import metrics, request_context
from server.config import PartyConfig
from server.grpc_tls import channel_options, peer_channel_credentials

log = logging.getLogger(__name__)
T = TypeVar("T")
TRANSIENT = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
BUSY_KEY = "x-starfish-busy"


def is_transient(exc: grpc.RpcError) -> bool:
    """The follower cannot answer now (down, restarting, store not writable) — not a refusal."""
    if exc.code() in TRANSIENT:
        return True
    if exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
        trailing = exc.trailing_metadata() if hasattr(exc, "trailing_metadata") else None
        return any(key == BUSY_KEY for key, _ in trailing or ())
    return False


MAX_BACKOFF_S = 5.0


class PeerRefused(RuntimeError):
    """The other party answered with a definite error (not a transient failure)."""

    def __init__(self, code: grpc.StatusCode | None, message: str):
        super().__init__(f"peer refused ({code.name if code else 'inconsistent reply'}): {message}")
        self.code = code


class Stopped(RuntimeError):
    """The party is shutting down while waiting for its peer."""


class PeerClient:
    def __init__(self, cfg: PartyConfig, stop: threading.Event):
        self.cfg = cfg
        self.stop = stop
        options = channel_options(cfg.limits.max_message_bytes) + reconnect_options()
        self.channel = grpc.secure_channel(cfg.peer_address, peer_channel_credentials(cfg), options=options)
        self.stub = peer_pb2_grpc.PeerServiceStub(self.channel)
        self.recovered_at = 0.0  #: unix time of the first successful call after a failed one
        self._failing = False

    def close(self) -> None:
        self.channel.close()

    def call(self, what: str, fn: Callable[[float], T]) -> T:
        """Run `fn(timeout)` until it succeeds, retrying transient failures with back-off."""
        delay = self.cfg.rounds.peer_retry_s
        while True:
            if self.stop.is_set():
                raise Stopped(f"stopping during peer call {what}")
            try:
                reply = fn(self.cfg.rounds.peer_timeout_s)
                self._succeeded(what)
                return reply
            except grpc.RpcError as exc:
                if self.stop.is_set():
                    raise Stopped(f"stopping during peer call {what}") from None
                code = exc.code()
                metrics.peer_call(what, code.name)
                if not is_transient(exc):
                    raise PeerRefused(code, exc.details() or "") from None
                self._failing = True
                log.warning("peer call %s failed (%s: %s); retrying in %.1f s", what, code.name, exc.details(), delay)
            self.stop.wait(delay)
            delay = min(2 * delay, MAX_BACKOFF_S)

    def _succeeded(self, what: str) -> None:
        metrics.peer_call(what, None)
        if self._failing:
            self._failing = False
            self.recovered_at = time.time()

    def unary(self, method: str, request):
        rpc, md = getattr(self.stub, method), request_context.outgoing_metadata()
        return self.call(method, lambda timeout: rpc(request, timeout=timeout, metadata=md))

    def try_unary(self, method: str, request, timeout_s: float):
        """One call without retries: the reply, or None when the peer is unreachable now."""
        rpc, md = getattr(self.stub, method), request_context.outgoing_metadata()
        try:
            return rpc(request, timeout=timeout_s, metadata=md)
        except grpc.RpcError as exc:
            if not is_transient(exc):
                raise PeerRefused(exc.code(), exc.details() or "") from None
            return None

    def stream_unary(self, method: str, make_requests: Callable[[], object]):
        rpc, md = getattr(self.stub, method), request_context.outgoing_metadata()
        return self.call(method, lambda timeout: rpc(make_requests(), timeout=timeout, metadata=md))

    def stream_stream(self, method: str, make_requests: Callable[[], object]) -> list:
        rpc, md = getattr(self.stub, method), request_context.outgoing_metadata()
        return self.call(method, lambda timeout: list(rpc(make_requests(), timeout=timeout, metadata=md)))
