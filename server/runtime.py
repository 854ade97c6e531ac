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
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from proto.starfish.v1 import admin_pb2_grpc, client_pb2_grpc, peer_pb2_grpc
from server import metrics
from server.admission import AdmissionInterceptor
from server.client_service import ClientService
from server.config import PartyConfig
from server.coordinator import RoundCoordinator
from server.evidence.certifier import Attestor, Certifier
from server.evidence.signing import load_identity
from server.jobs.follower import JobFollower
from server.jobs.jobstore import JobStore
from server.jobs.manager import JobManager
from server.jobs.services import JobAdminService, JobPeerService
from server.peer_client import PeerClient
from server.peer_service import PeerService
from server.request_context import RequestIdInterceptor
from server.state import PartyState
from server.store import Store
from server.tls import channel_options, client_port_credentials, peer_port_credentials

log = logging.getLogger(__name__)
PEER_THREADS = 8  #: concurrent calls on the peer port (only the other party calls it)
STOP_GRACE_S = 2.0


class PartyServer:
    def __init__(self, cfg: PartyConfig):
        self.cfg = cfg
        identity = load_identity(cfg)  # a misconfigured signing key stops the start, with the reason
        self.state = PartyState(cfg, Store(cfg.data_dir, cfg.role))
        self.peer = PeerClient(cfg, self.state.stopping)
        opts = channel_options(cfg.limits.max_message_bytes)
        self.server = grpc.server(
            futures.ThreadPoolExecutor(cfg.admission.threads, thread_name_prefix="client-port"),
            interceptors=[RequestIdInterceptor(), AdmissionInterceptor(cfg)],  # ids first: refusals carry one
            options=opts,
        )
        self.peer_server = grpc.server(
            futures.ThreadPoolExecutor(PEER_THREADS), options=opts, interceptors=[RequestIdInterceptor()]
        )
        client_pb2_grpc.add_ClientServiceServicer_to_server(ClientService(self.state), self.server)
        self.jobs = JobStore(cfg.data_dir)
        attestor = Attestor(cfg.role, self.state.store, self.jobs, identity)
        certifier = Certifier(attestor, self.peer, cfg.tls.ca) if cfg.role == 0 else None
        self.job_manager = JobManager(self.state, self.jobs, self.peer, certifier) if certifier else None
        self.job_follower = JobFollower(self.state, self.jobs) if cfg.role == 1 else None
        if self.job_manager is not None:
            admin_pb2_grpc.add_AdminServiceServicer_to_server(
                JobAdminService(self.state, self.peer, self.job_manager), self.server
            )
        self.health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        peer_service = (
            JobPeerService(self.state, self.job_follower, attestor) if self.job_follower else PeerService(self.state)
        )
        peer_pb2_grpc.add_PeerServiceServicer_to_server(peer_service, self.peer_server)
        self.port = self.server.add_secure_port(cfg.listen, client_port_credentials(cfg))
        self.peer_port = self.peer_server.add_secure_port(cfg.peer_listen, peer_port_credentials(cfg))
        if not self.port or not self.peer_port:
            raise OSError(f"cannot bind {cfg.listen} or {cfg.peer_listen}")
        self.coordinator = RoundCoordinator(self.state, self.peer) if cfg.role == 0 else None
        metrics.bind(cfg.name, cfg.data_dir, self._halted, lambda: len(self.jobs.queued()))
        metrics.watch_certificates({"tls": cfg.tls.cert, "ca": cfg.tls.ca, "signing": cfg.signing.cert})
        obs = cfg.observability
        tls = (cfg.tls.cert, cfg.tls.key) if obs.metrics_tls else (None, None)
        self.metrics_server = metrics.serve(obs.metrics_listen, *tls) if obs.metrics_listen else None

    def _halted(self) -> bool:
        rec = self.state.store.current_round()
        return rec is not None and rec.state == "failed"

    def start(self) -> None:
        self.server.start()
        self.peer_server.start()
        if self.coordinator is not None:
            self.coordinator.start()
        if self.job_manager is not None:
            self.job_manager.start()
        self.health.set("", health_pb2.HealthCheckResponse.SERVING)
        log.info("%s serving clients on %s, peer on %s", self.cfg.name, self.cfg.listen, self.cfg.peer_listen)

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
        done = [self.server.stop(STOP_GRACE_S), self.peer_server.stop(STOP_GRACE_S)]
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
