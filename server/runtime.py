"""A party process: store, gRPC servers (client/admin/health port behind admission control,
and the mutual-TLS peer port), and on party0 the round coordinator. `PartyServer(cfg).run_until_signal()`
serves until SIGINT/SIGTERM and then stops cleanly (in-flight calls get a grace period).
"""

from __future__ import annotations

import logging
import signal
import threading
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2_grpc

from proto.starfish.v1 import admin_pb2_grpc, client_pb2_grpc, peer_pb2_grpc
from server import metrics
from server.admin_gate import ClientPortAdminGate
from server.admission import AdmissionInterceptor
from server.client_service import ClientService
from server.config import PartyConfig
from server.coordinator import RoundCoordinator
from server.evidence.certifier import Attestor, Certifier
from server.evidence.signing import load_identity
from server.file_modes import check_private
from server.grpc_tls import channel_options, check_own_certificate, client_port_credentials, peer_port_credentials
from server.jobs.follower import JobFollower
from server.jobs.jobstore import JobStore
from server.jobs.manager import JobManager
from server.jobs.services import JobAdminService, JobPeerService
from server.party_state import PartyState
from server.peer_client import PeerClient
from server.peer_service import PeerService
from server.readiness import Readiness, peer_check, store_check
from server.request_context import RequestIdInterceptor
from server.storage_faults import StorageFaultInterceptor
from server.store import Store
from server.tls_floor import check_tls13
from server.undecodable import UndecodableInterceptor

log = logging.getLogger(__name__)
PEER_THREADS = 8  #: concurrent calls on the peer port (only the other party calls it)
STOP_GRACE_S = 2.0
EXCLUSIVE_PORT = ("grpc.so_reuseport", 0)
"""gRPC sets SO_REUSEPORT by default, so a second process on a party's port binds it too and
the kernel splits the connections between them; without it the second bind fails."""


def bind_exclusively(server: grpc.Server, key: str, address: str, credentials: grpc.ServerCredentials) -> int:
    """Bind `address` (the config's `key`) for this server alone, or raise OSError naming both.
    gRPC reports a failed bind by raising RuntimeError (recent versions) or returning 0."""
    try:
        port = server.add_secure_port(address, credentials)
    except RuntimeError:
        port = 0
    if not port:
        raise OSError(
            f"{key} = {address!r}: cannot bind this address (another process holds the port, or the "
            "host has no such address)"
        )
    return port


def serve_metrics(listen: str, certfile, keyfile):
    """The metrics endpoint, or OSError naming `observability.metrics_listen` when it cannot bind."""
    try:
        return metrics.serve(listen, certfile, keyfile)
    except OSError as exc:
        raise OSError(f"observability.metrics_listen = {listen!r}: cannot bind: {exc.strerror or exc}") from None


class PartyServer:
    def __init__(self, cfg: PartyConfig):
        self.cfg = cfg
        check_private(cfg.data_dir)  # a store others can read is refused, naming the path
        check_own_certificate(cfg)
        check_tls13()  # the gRPC ports accept TLS 1.3 only (server.tls_floor)
        identity = load_identity(cfg)  # a misconfigured signing key stops the start, with the reason
        self.state = PartyState(cfg, Store(cfg.data_dir, cfg.role))
        self.peer = PeerClient(cfg, self.state.stopping)
        opts = channel_options(cfg.limits.max_message_bytes) + [EXCLUSIVE_PORT]
        self.server = grpc.server(
            futures.ThreadPoolExecutor(cfg.admission.threads, thread_name_prefix="client-port"),
            # ids first: refusals carry one; storage faults answered as retryable, innermost
            interceptors=[
                RequestIdInterceptor(),
                ClientPortAdminGate(cfg.admin_listen),  # the admin token is never accepted here
                UndecodableInterceptor(),
                AdmissionInterceptor(cfg),
                StorageFaultInterceptor(cfg.role),
            ],
            options=opts,
        )
        self.peer_server = grpc.server(
            futures.ThreadPoolExecutor(PEER_THREADS),
            options=opts,
            interceptors=[RequestIdInterceptor(), UndecodableInterceptor(), StorageFaultInterceptor(cfg.role)],
        )
        client_pb2_grpc.add_ClientServiceServicer_to_server(ClientService(self.state), self.server)
        self.jobs = JobStore(cfg.data_dir)
        attestor = Attestor(cfg.role, self.state.store, self.jobs, identity)
        certifier = Certifier(attestor, self.peer, cfg.tls.ca) if cfg.role == 0 else None
        self.job_manager = JobManager(self.state, self.jobs, self.peer, certifier) if certifier else None
        self.job_follower = JobFollower(self.state, self.jobs) if cfg.role == 1 else None
        self.admin_server = None
        if self.job_manager is not None:
            admin = JobAdminService(self.state, self.peer, self.job_manager)
            admin_pb2_grpc.add_AdminServiceServicer_to_server(admin, self.server)  # clients' own unlearning only
            self.admin_server = self._admin_server(admin, opts) if cfg.admin_listen else None
        self.health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        self.readiness = Readiness(self.health, self._checks(), self.state.stopping)
        peer_service = (
            JobPeerService(self.state, self.job_follower, attestor) if self.job_follower else PeerService(self.state)
        )
        peer_pb2_grpc.add_PeerServiceServicer_to_server(peer_service, self.peer_server)
        self.port = bind_exclusively(self.server, "listen", cfg.listen, client_port_credentials(cfg))
        self.peer_port = bind_exclusively(self.peer_server, "peer_listen", cfg.peer_listen, peer_port_credentials(cfg))
        self.coordinator = RoundCoordinator(self.state, self.peer) if cfg.role == 0 else None
        metrics.bind(cfg.name, cfg.data_dir, self._halted, lambda: len(self.jobs.queued()), cfg.limits.min_free_bytes)
        metrics.validation_enabled(cfg.validation.enabled)
        metrics.watch_certificates({"tls": cfg.tls.cert, "ca": cfg.tls.ca, "signing": cfg.signing.cert})
        obs = cfg.observability
        tls = (cfg.tls.cert, cfg.tls.key) if obs.metrics_tls else (None, None)
        self.metrics_server = serve_metrics(obs.metrics_listen, *tls) if obs.metrics_listen else None

    def _admin_server(self, admin: JobAdminService, opts: list) -> grpc.Server:
        """The admin API on its own listener, `admin_listen` (server.admin_gate)."""
        server = grpc.server(
            futures.ThreadPoolExecutor(self.cfg.admission.admin_threads, thread_name_prefix="admin-port"),
            interceptors=[RequestIdInterceptor(), UndecodableInterceptor(), StorageFaultInterceptor(self.cfg.role)],
            options=opts,
        )
        admin_pb2_grpc.add_AdminServiceServicer_to_server(admin, server)
        bind_exclusively(server, "admin_listen", self.cfg.admin_listen, client_port_credentials(self.cfg))
        return server

    def _checks(self) -> list:
        """What this party needs to make progress (server.readiness)."""
        return [
            peer_check(self.peer.channel, self.cfg.peer_address),
            store_check(self.cfg.data_dir),
            self._training_check,
            self._dealer_check,
        ]

    def _training_check(self) -> tuple[str, str] | None:
        rec = self.state.store.current_round()
        if rec is None or rec.state != "failed":
            return None
        return "training_halted", f"training is halted: round {rec.round} failed ({rec.error})"

    def _dealer_check(self) -> tuple[str, str] | None:
        for job in self.jobs.all():
            if job.state == "running" and "waiting for the dealer service" in job.step:
                return "dealer_unreachable", f"job {job.job_id}: {job.step}"
        return None

    def _halted(self) -> bool:
        rec = self.state.store.current_round()
        return rec is not None and rec.state == "failed"

    def start(self) -> None:
        self.server.start()
        self.peer_server.start()
        if self.admin_server is not None:
            self.admin_server.start()
            log.info("%s serving the admin API on %s", self.cfg.name, self.cfg.admin_listen)
        if self.coordinator is not None:
            self.coordinator.start()
        if self.job_manager is not None:
            self.job_manager.start()
        self.readiness.start()  # liveness SERVING now; "" once the party can make progress
        log.info("%s serving clients on %s, peer on %s", self.cfg.name, self.cfg.listen, self.cfg.peer_listen)
        if self.cfg.validation.enabled:
            log.info("input validation ON: uploads and task answers are checked in 2PC before use")
        else:
            log.warning("input validation OFF ([validation] enabled = false or no [jobs] dealer): inputs are trusted")

    def stop(self) -> None:
        self.health.enter_graceful_shutdown()
        self.state.stopping.set()
        self.state.notify_tasks()
        self.peer.close()  # an in-flight peer call ends at once; the coordinator sees `stopping`
        if self.coordinator is not None:
            self.coordinator.thread.join(timeout=STOP_GRACE_S)
        if self.job_manager is not None:
            self.job_manager.thread.join(timeout=STOP_GRACE_S)
            self.job_manager.close()
        if self.job_follower is not None:
            self.job_follower.stop()
        if self.state.stage1_clip is not None:
            self.state.stage1_clip.close()
        servers = [self.server, self.peer_server, *([self.admin_server] if self.admin_server else [])]
        done = [server.stop(STOP_GRACE_S) for server in servers]
        for event in done:
            event.wait()
        if self.metrics_server is not None:
            self.metrics_server.shutdown()
        self.state.store.close()
        self.jobs.close()
        log.info("%s stopped", self.cfg.name)

    def run_until_signal(self) -> None:
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        self.start()
        stop.wait()
        self.stop()
