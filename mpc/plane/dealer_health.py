"""The dealer's gRPC health service (`[observability] health_listen` of dealer.toml), as the
parties have on their client port.

`grpc.health.v1.Health` on a listener of its own: the overall service ("") and the named
`services` (the parties' liveness name) are SERVING while the dealer service accepts
sessions and NOT_SERVING from the start of its shutdown. Server-side TLS with the dealer's
certificate; the TLS 1.3 floor of gRPC listeners (`server.tls_floor`) is set by
`starfish dealer` before gRPC loads and checked there before this is served. It carries no
session data and names only serving states. Keep it on loopback or a management network:
`starfish preflight --config dealer.toml --no-bind` asks it on the dealer's host.
"""

from __future__ import annotations

import logging
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from mpc.plane.tls import TlsFiles

log = logging.getLogger(__name__)
THREADS = 2  #: a health check is one small unary call


class DealerHealth:
    """The health listener of one dealer process."""

    def __init__(self, listen: str, tls: TlsFiles, services: tuple[str, ...] = ()) -> None:
        self.services = ("", *services)
        self.servicer = health.HealthServicer()
        self.server = grpc.server(futures.ThreadPoolExecutor(THREADS, thread_name_prefix="dealer-health"))
        health_pb2_grpc.add_HealthServicer_to_server(self.servicer, self.server)
        credentials = grpc.ssl_server_credentials([(tls.key.read_bytes(), tls.cert.read_bytes())])
        try:
            bound = self.server.add_secure_port(listen, credentials)
        except RuntimeError:
            bound = 0
        if not bound:
            raise OSError(f"observability.health_listen = {listen!r}: cannot bind this address")
        self.listen = listen

    def start(self) -> None:
        """Serve, every service SERVING (call once the dealer service listens)."""
        for name in self.services:
            self.servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
        self.server.start()
        log.info("dealer health service on %s", self.listen)

    def stop(self) -> None:
        """NOT_SERVING to every later check, then close the listener."""
        self.servicer.enter_graceful_shutdown()
        self.server.stop(2).wait()
