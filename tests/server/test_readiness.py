"""Health readiness (server.readiness): each check detects what stops progress, and the
health service's "" status follows the checks while liveness stays SERVING."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2

from mpc.ports import free_port
from server.readiness import LIVENESS, NOT_SERVING, SERVING, Readiness, peer_check, store_check


def _status(servicer: health.HealthServicer, service: str = "") -> int:
    return servicer.Check(health_pb2.HealthCheckRequest(service=service), None).status


def test_store_check_reports_an_unwritable_store(tmp_path: Path):
    assert store_check(tmp_path)() is None
    assert not list(tmp_path.iterdir())  # the probe file is gone
    blocked = tmp_path / "data"
    blocked.write_text("a file where the store directory should be")
    reason, detail = store_check(blocked)()
    assert reason == "store_unwritable" and str(blocked) in detail


def test_peer_check_reports_a_peer_that_does_not_answer():
    address = f"127.0.0.1:{free_port()}"
    with grpc.insecure_channel(address) as channel:
        start = time.monotonic()
        reason, detail = peer_check(channel, address)()
    assert reason == "peer_unreachable" and address in detail
    assert time.monotonic() - start < 10


def test_status_follows_the_checks_and_a_lasting_stop_is_logged_once(caplog, monkeypatch):
    monkeypatch.setattr("server.readiness.CHECK_S", 0.05)
    caplog.set_level(logging.INFO, logger="server.readiness")
    problem: list = [None]
    servicer, stopping = health.HealthServicer(), threading.Event()
    readiness = Readiness(servicer, [lambda: problem[0]], stopping)
    readiness.start()
    try:
        assert _status(servicer, LIVENESS) == SERVING
        deadline = time.monotonic() + 5
        while _status(servicer) != SERVING:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        problem[0] = ("store_unwritable", "the store is not writable")
        time.sleep(0.5)
        assert _status(servicer) == NOT_SERVING and _status(servicer, LIVENESS) == SERVING
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and "store_unwritable" in warnings[0].getMessage()
        problem[0] = None
        time.sleep(0.5)
        assert _status(servicer) == SERVING
        assert any("make progress again" in r.getMessage() for r in caplog.records)
    finally:
        stopping.set()
        readiness.thread.join(5)
