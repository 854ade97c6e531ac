"""`starfish dealer --config dealer.toml`: run the dealer service (the third operator).

It serves the correlated randomness of every MPC session of the parties named in its
configuration until stopped (SIGTERM / Ctrl-C), over TLS on its configured address only
(`mpc.plane.dealer_service`; keys and limits: docs/DEPLOY.md). It never sees data. With
`[observability]` it also serves its metrics and a gRPC health service (loopback).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("dealer", help="run the dealer service (correlated randomness; never sees data)")
    parser.add_argument("--config", required=True, help="the dealer's TOML configuration (docs/DEPLOY.md)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from mpc.plane.dealer_config import DealerConfigError, load_dealer_config
    from mpc.plane.dealer_service import DealerService

    logging.basicConfig(level=logging.INFO, format="%(asctime)s dealer %(levelname)s %(message)s")
    try:
        config = load_dealer_config(args.config)
        config.tls.check()  # type: ignore[union-attr]
        service = DealerService(config)
    except (DealerConfigError, OSError) as exc:
        print(f"dealer: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        health = _health(config)
    except OSError as exc:
        print(f"dealer: {exc}", file=sys.stderr)
        return 2
    service.start()
    if config.metrics_listen:
        from mpc.plane.dealer_metrics import serve

        serve(config.metrics_listen, service)
    if health is not None:
        health.start()
    stop.wait()
    if health is not None:
        health.stop()
    service.stop()
    return 0


def _health(config):
    """The gRPC health listener of `[observability] health_listen` (None without one); gRPC
    listeners serve TLS 1.3 only (server.tls_floor, set by `starfish_cli.entry`)."""
    if not config.health_listen:
        return None
    from mpc.plane.dealer_health import DealerHealth
    from server.readiness import LIVENESS
    from server.tls_floor import check_tls13

    check_tls13()
    return DealerHealth(config.health_listen, config.tls, (LIVENESS,))
