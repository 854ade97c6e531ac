"""The admin API's own listener and what the client port still answers of it.

party0 serves `AdminService` on `admin_listen` (server-side TLS 1.3, every call with the
admin token: `server.auth`), a port of its own that the operator binds to an
operator-only address and the recipe's firewall opens to `[admin] sources` only. The
client port, open to every client, answers one admin method: a client's request to
unlearn its own data (`AdminService/Unlearn` with its client credential,
`client_sdk.admin.request_own_unlearning`). `ClientPortAdminGate` refuses every other
admin call there, and any call carrying the admin token, with PERMISSION_DENIED naming
the admin listener, before the call reaches the service: the admin token is never
accepted on the client port.
"""

from __future__ import annotations

import grpc

from server.auth import ADMIN_TOKEN_KEY

ADMIN_PREFIX = "/starfish.v1.AdminService/"
CLIENT_ADMIN_METHODS = frozenset({ADMIN_PREFIX + "Unlearn"})
"""The admin methods the client port answers, for a client's own data only."""


def _refusal(handler: grpc.RpcMethodHandler | None, message: str) -> grpc.RpcMethodHandler:
    """A handler that ends the call with PERMISSION_DENIED, in the method's own streaming shape."""

    def abort(_request, context: grpc.ServicerContext):
        context.abort(grpc.StatusCode.PERMISSION_DENIED, message)

    shape = (handler.request_streaming, handler.response_streaming) if handler is not None else (False, False)
    make = {
        (False, False): grpc.unary_unary_rpc_method_handler,
        (False, True): grpc.unary_stream_rpc_method_handler,
        (True, False): grpc.stream_unary_rpc_method_handler,
        (True, True): grpc.stream_stream_rpc_method_handler,
    }[shape]
    return make(abort)


class ClientPortAdminGate(grpc.ServerInterceptor):
    """On the client port: admin calls other than a client's own unlearning are refused."""

    def __init__(self, admin_listen: str) -> None:
        where = f"admin_listen {admin_listen}" if admin_listen else "no admin listener (admin_listen unset)"
        self.message = f"the admin API is not served on the client port: party0 has {where}"

    def intercept_service(self, continuation, handler_call_details):
        method = handler_call_details.method
        if not method.startswith(ADMIN_PREFIX):
            return continuation(handler_call_details)
        keys = {k for k, _ in handler_call_details.invocation_metadata or ()}
        if method not in CLIENT_ADMIN_METHODS or ADMIN_TOKEN_KEY in keys:
            return _refusal(continuation(handler_call_details), self.message)
        return continuation(handler_call_details)
