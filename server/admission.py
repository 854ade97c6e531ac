"""Admission control on the client/admin port: no client can use up the party's threads.

A synchronous gRPC server runs each call on a worker thread, and a WatchTasks stream holds
its thread for as long as it is open. Calls are sorted into classes by a server interceptor:

* `stream` — ClientService/WatchTasks;
* `request` — every other client call (uploads, models, round and upload status), and
  AdminService calls that do not carry the admin token (a client filing its own unlearning);
* unlimited — AdminService calls with the admin token, and the health service.

Each class has a limit per client (`[admission] max_streams_per_client`,
`max_requests_per_client`; calls without valid client credentials share one bucket) and a
limit over all clients (`max_streams`, `max_requests`). The worker pool has
`max_streams + max_requests + admin_threads` threads, so with both client classes at their
limits `admin_threads` threads are still free for the admin API and health checks. A call
past a limit ends at once with RESOURCE_EXHAUSTED, a message naming the limit, and the
trailing metadata `x-starfish-busy: admission` (the SDK retries it with back-off).
`Admission.refusal` is where a call is refused. Refusals are logged at most once per
`LOG_EVERY_S` per class, with the number refused since the last line.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable

import grpc

from server.auth import has_admin_token, verified_client
from server.config import AdmissionConfig, PartyConfig

log = logging.getLogger(__name__)
BUSY_KEY = "x-starfish-busy"
CLIENT_PREFIX = "/starfish.v1.ClientService/"
ADMIN_PREFIX = "/starfish.v1.AdminService/"
STREAM_METHODS = frozenset({CLIENT_PREFIX + "WatchTasks"})
WHAT = {"stream": "WatchTasks streams", "request": "requests"}
LOG_EVERY_S = 5.0


class Admission:
    """Counts of calls in flight per (class, client) and per class; thread-safe."""

    def __init__(self, cfg: AdmissionConfig, party: int):
        self.cfg = cfg
        self.party = party
        self._lock = threading.Lock()
        self._per_client: Counter[tuple[str, str]] = Counter()
        self._per_class: Counter[str] = Counter()

    def _limits(self, kind: str) -> tuple[tuple[int, str], tuple[int, str]]:
        if kind == "stream":
            return (self.cfg.max_streams_per_client, "max_streams_per_client"), (self.cfg.max_streams, "max_streams")
        return (self.cfg.max_requests_per_client, "max_requests_per_client"), (self.cfg.max_requests, "max_requests")

    def refusal(self, kind: str, client: str) -> str | None:
        """Why a new `kind` call of `client` ("" = unauthenticated) is refused now, else None (admitted)."""
        (per_client, client_key), (total, total_key) = self._limits(kind)
        who = f"client {client!r}" if client else "unauthenticated callers"
        with self._lock:
            if self._per_client[(kind, client)] >= per_client:
                return (
                    f"party{self.party}: {who} already has {per_client} concurrent {WHAT[kind]} "
                    f"(limit [admission] {client_key} = {per_client}); retry when one ends"
                )
            if self._per_class[kind] >= total:
                return (
                    f"party{self.party} is serving {total} concurrent {WHAT[kind]} of all clients "
                    f"(limit [admission] {total_key} = {total}); retry later"
                )
            self._per_client[(kind, client)] += 1
            self._per_class[kind] += 1
        return None

    def leave(self, kind: str, client: str) -> None:
        with self._lock:
            self._per_client[(kind, client)] -= 1
            self._per_class[kind] -= 1
            if self._per_client[(kind, client)] <= 0:
                del self._per_client[(kind, client)]


def call_class(cfg: PartyConfig, method: str, metadata) -> str | None:
    """`stream`, `request`, or None for an unlimited call (admin with its token, health)."""
    if method in STREAM_METHODS:
        return "stream"
    if method.startswith(CLIENT_PREFIX):
        return "request"
    if method.startswith(ADMIN_PREFIX) and not has_admin_token(cfg, metadata):
        return "request"
    return None


def _limited(handler: grpc.RpcMethodHandler, enter: Callable[[grpc.ServicerContext], Callable[[], None]]):
    """The same handler, with `enter(context)` run first and its release run when the call ends."""
    inner = handler.unary_unary or handler.unary_stream or handler.stream_unary or handler.stream_stream

    if handler.response_streaming:

        def behavior(request, context):
            leave = enter(context)
            try:
                yield from inner(request, context)
            finally:
                leave()
    else:

        def behavior(request, context):
            leave = enter(context)
            try:
                return inner(request, context)
            finally:
                leave()

    factory = {
        (False, False): grpc.unary_unary_rpc_method_handler,
        (False, True): grpc.unary_stream_rpc_method_handler,
        (True, False): grpc.stream_unary_rpc_method_handler,
        (True, True): grpc.stream_stream_rpc_method_handler,
    }[(handler.request_streaming, handler.response_streaming)]
    return factory(
        behavior, request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer
    )


class AdmissionInterceptor(grpc.ServerInterceptor):
    """Applies `Admission` to every call of the client/admin port."""

    def __init__(self, cfg: PartyConfig):
        self.cfg = cfg
        self.admission = Admission(cfg.admission, cfg.role)
        self._log_lock = threading.Lock()
        self._unlogged: Counter[str] = Counter()  #: refusals per class since the last log line
        self._logged_at: dict[str, float] = {}

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        metadata = handler_call_details.invocation_metadata
        kind = call_class(self.cfg, handler_call_details.method, metadata)
        if handler is None or kind is None:
            return handler
        client = verified_client(self.cfg, metadata) or ""
        return _limited(handler, lambda context: self._enter(kind, client, context))

    def _enter(self, kind: str, client: str, context: grpc.ServicerContext) -> Callable[[], None]:
        refusal = self.admission.refusal(kind, client)
        if refusal is not None:
            self._log_refusal(kind, refusal)
            context.set_trailing_metadata(((BUSY_KEY, "admission"),))
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, refusal)
        released = threading.Event()
        lock = threading.Lock()

        def leave() -> None:
            with lock:
                if released.is_set():
                    return
                released.set()
            self.admission.leave(kind, client)

        context.add_callback(leave)  # also when the call is cancelled before its generator finishes
        return leave

    def _log_refusal(self, kind: str, refusal: str) -> None:
        with self._log_lock:
            self._unlogged[kind] += 1
            now = time.monotonic()
            if now - self._logged_at.get(kind, -LOG_EVERY_S) < LOG_EVERY_S:
                return
            count, self._unlogged[kind], self._logged_at[kind] = self._unlogged[kind], 0, now
        log.warning("admission refused %d call(s) since the last report; latest: %s", count, refusal)
