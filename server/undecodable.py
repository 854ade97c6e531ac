"""Requests that are not valid protobuf: refused with INVALID_ARGUMENT, not INTERNAL.

gRPC's server decodes each request message before the handler runs and ends a call whose
bytes do not decode (a field number 0, a cut varint, a wrong wire type, nesting beyond
protobuf's recursion limit) with INTERNAL "Exception deserializing request!", as if the
party had failed. `UndecodableInterceptor` decodes instead, keeps a failure as an
`Undecodable` value, and the handler's wrapper refuses it with INVALID_ARGUMENT naming the
message type — for a streamed request, at the first message that does not decode.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.message import DecodeError


@dataclass(frozen=True)
class Undecodable:
    """A request message whose bytes did not decode."""

    error: str


def _tolerant(deserialize: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def decode(data: bytes) -> Any:
        try:
            return deserialize(data)
        except (DecodeError, RecursionError) as exc:
            return Undecodable(str(exc) or type(exc).__name__)

    return decode


def _refuse(context: grpc.ServicerContext, message_type: str, bad: Undecodable) -> None:
    context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"the request is not a valid {message_type} message: {bad.error}")


def _checked(requests: Iterator[Any], context: grpc.ServicerContext, message_type: str) -> Iterator[Any]:
    for request in requests:
        if isinstance(request, Undecodable):
            _refuse(context, message_type, request)
        yield request


def _unary_request(behavior: Callable, message_type: str) -> Callable:
    def run(request, context):
        if isinstance(request, Undecodable):
            _refuse(context, message_type, request)
        return behavior(request, context)

    return run


def _stream_request(behavior: Callable, message_type: str) -> Callable:
    def run(requests, context):
        return behavior(_checked(requests, context, message_type), context)

    return run


class UndecodableInterceptor(grpc.ServerInterceptor):
    """Decodes every request itself; an undecodable one ends INVALID_ARGUMENT (module docstring)."""

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None or handler.request_deserializer is None:
            return handler
        message_type = getattr(handler.request_deserializer, "__self__", None)
        name = getattr(message_type, "__name__", "request")
        handler = handler._replace(request_deserializer=_tolerant(handler.request_deserializer))
        if handler.unary_unary:
            return handler._replace(unary_unary=_unary_request(handler.unary_unary, name))
        if handler.unary_stream:
            return handler._replace(unary_stream=_unary_request(handler.unary_stream, name))
        if handler.stream_unary:
            return handler._replace(stream_unary=_stream_request(handler.stream_unary, name))
        return handler._replace(stream_stream=_stream_request(handler.stream_stream, name))
