"""Request ids: every RPC a party serves runs under an id that its log lines carry.

A caller may send `x-request-id` (letters, digits, `_ . : -`, at most 64 characters);
otherwise the party assigns a fresh random one. The id is returned to the caller in the
initial metadata, so an operator can find a client's failed call in the logs, and it is
forwarded on the party0 → party1 calls made while serving it, so one id follows a step
across both parties. Background work runs under a named scope (`scope("round-7")`,
`scope("job-j…")`) and forwards that name the same way.

Nothing else from the metadata is read here: tokens never reach a log line.
"""

from __future__ import annotations

import contextvars
import re
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import grpc

from server import metrics

REQUEST_ID_KEY = "x-request-id"
_VALID = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
_current: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")
PEER_SERVICE = "/starfish.v1.PeerService/"


def current() -> str:
    """The id of the request (or background scope) this thread is serving; "-" outside one."""
    return _current.get()


def outgoing_metadata() -> tuple[tuple[str, str], ...]:
    """Metadata to forward the current id on an outgoing call."""
    rid = _current.get()
    return ((REQUEST_ID_KEY, rid),) if rid != "-" else ()


@contextmanager
def scope(request_id: str) -> Iterator[None]:
    """Run a block under `request_id` (background work: rounds, jobs)."""
    token = _current.set(request_id)
    try:
        yield
    finally:
        _current.reset(token)


def _incoming(details: grpc.HandlerCallDetails) -> str:
    for key, value in details.invocation_metadata or ():
        if key == REQUEST_ID_KEY and isinstance(value, str) and _VALID.match(value):
            return value
    return secrets.token_hex(8)


def _unary(behavior: Callable, rid: str) -> Callable:
    def run(request, context):
        with scope(rid):
            context.send_initial_metadata(((REQUEST_ID_KEY, rid),))
            return behavior(request, context)

    return run


def _streaming(behavior: Callable, rid: str) -> Callable:
    def run(request, context):
        with scope(rid):
            context.send_initial_metadata(((REQUEST_ID_KEY, rid),))
            responses = iter(behavior(request, context))
        while True:  # every step of the response generator runs under the id
            with scope(rid):
                try:
                    item = next(responses)
                except StopIteration:
                    return
            yield item

    return run


class RequestIdInterceptor(grpc.ServerInterceptor):
    """Runs every handler under its request id and counts the RPC (`starfish_rpc_requests_total`)."""

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        metrics.rpc_received(method.rsplit("/", 1)[-1], method.startswith(PEER_SERVICE))
        rid = _incoming(handler_call_details)
        if handler.unary_unary:
            return handler._replace(unary_unary=_unary(handler.unary_unary, rid))
        if handler.stream_unary:
            return handler._replace(stream_unary=_unary(handler.stream_unary, rid))
        if handler.unary_stream:
            return handler._replace(unary_stream=_streaming(handler.unary_stream, rid))
        return handler._replace(stream_stream=_streaming(handler.stream_stream, rid))
