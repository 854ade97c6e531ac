"""Operator metrics of the dealer service, served for Prometheus (`[observability] metrics_listen`
of dealer.toml; keep it on loopback or a management network).

| metric | type | meaning |
| --- | --- | --- |
| starfish_dealer_info{identity} | gauge | 1; names the dealer's identity (its certificate's common name) |
| starfish_dealer_sessions_running | gauge | sessions joined and not yet ended |
| starfish_dealer_sessions_remembered | gauge | finished session ids kept (an id never runs twice) |
| starfish_certificate_expiry_timestamp_seconds{use} | gauge | expiry (unix time) of: tls, ca (read per scrape) |

Only counts and dates: never a key, a session key or a request's values. A scrape that
answers is the dealer's liveness (Prometheus's `up`; the alert StarfishDealerDown).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from cryptography import x509
from prometheus_client import CollectorRegistry, Gauge, start_http_server

if TYPE_CHECKING:
    from mpc.plane.dealer_service import DealerService

log = logging.getLogger(__name__)


def _expiry(path: Path) -> float:
    try:
        return x509.load_pem_x509_certificate(Path(path).read_bytes()).not_valid_after_utc.timestamp()
    except (OSError, ValueError):
        return float("nan")


def registry_for(service: DealerService, identity: str) -> CollectorRegistry:
    """A registry whose gauges read `service`'s state at scrape time."""
    registry = CollectorRegistry()
    Gauge("starfish_dealer_info", "1, labelled with the dealer's identity", ["identity"], registry=registry).labels(
        identity
    ).set(1)
    running = Gauge("starfish_dealer_sessions_running", "sessions in progress", registry=registry)
    running.set_function(lambda: len(service.sessions.snapshot()["running"]))
    kept = Gauge("starfish_dealer_sessions_remembered", "finished session ids kept", registry=registry)
    kept.set_function(lambda: len(service.sessions.snapshot()["finished"]))
    expiry = Gauge(
        "starfish_certificate_expiry_timestamp_seconds", "unix time a certificate expires", ["use"], registry=registry
    )
    tls = service.config.tls
    if tls is not None:
        expiry.labels("tls").set_function(lambda: _expiry(tls.cert))
        expiry.labels("ca").set_function(lambda: _expiry(tls.ca))
    return registry


def serve(listen: str, service: DealerService, identity: str = "dealer"):
    """Serve GET /metrics on `listen` (host:port); returns the HTTP server."""
    host, _, port = listen.rpartition(":")
    server, _thread = start_http_server(int(port), addr=host.strip("[]"), registry=registry_for(service, identity))
    log.info("dealer metrics on http://%s/metrics", listen)
    return server
