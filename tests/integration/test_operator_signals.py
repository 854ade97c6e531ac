"""Signals an operator can trust (real party processes and dealer on loopback):

* an idle deployment (a round nobody uploads to) logs no warning and counts no round below
  its cohort, so StarfishRoundBelowCohort cannot fire;
* an unlearning job filed while such an empty round is open ends it at once instead of
  waiting `[jobs] pause_training_after_s` (300 s);
* health "" is SERVING while the party can make progress and NOT_SERVING (reason exported)
  when the other party is down, while the liveness service stays SERVING.
"""

from __future__ import annotations

import time

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from harness.local import LocalDeployment
from server.readiness import LIVENESS

from helpers.metrics_scrape import scrape, value
from helpers.plumbing_schedule import PLUMBING_SCHEDULE

pytestmark = pytest.mark.timeout(300)
CLIENTS = ["a", "b", "c"]
M = 16


def _health(dep: LocalDeployment, role: int, service: str = "") -> int:
    creds = grpc.ssl_channel_credentials(root_certificates=dep.ca_cert.read_bytes())
    with grpc.secure_channel(dep.address(role), creds) as ch:
        return health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=service), timeout=5).status


def _until(predicate, timeout_s: float, what: str):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        found = predicate()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout_s} s: {what}")


def _round(dep: LocalDeployment, index: int):
    with dep.admin() as admin:
        return next((r for r in admin.status().rounds if r.round == index), None)


def _train_one_round(dep: LocalDeployment) -> None:
    with dep.admin() as admin:
        admin.start_training("toy", np.linspace(-1, 1, M).astype(np.float32), 0.5)
    for i, c in enumerate(CLIENTS):
        with dep.client(c) as sdk:
            sdk.register()
            view = sdk.wait_for_round(0, timeout_s=60)
            sdk.submit(view.round, np.random.default_rng(i).normal(size=M), 10, model_hash=view.model_hash)
    _until(lambda: (r := _round(dep, 1)) is not None and r.state == "committed", 60, "round 1 commits")


def test_idle_rounds_are_quiet_an_empty_round_does_not_hold_a_job_and_health_tells(tmp_path):
    dep = LocalDeployment(tmp_path / "dep", clients=CLIENTS, rounds={"deadline_s": 0.5, "poll_s": 0.05})
    dep.start()
    try:
        _until(lambda: _health(dep, 0) == health_pb2.HealthCheckResponse.SERVING, 20, "party0 ready")
        _train_one_round(dep)
        log = dep.root / "logs" / "party0.log"
        offset = log.stat().st_size
        # round 1 may have waited below k while its uploads came in one by one: only round 2's
        # idle deadlines are this test's, so the count is compared with its value before them
        waited = value(scrape(dep.metrics_url(0)), "starfish_rounds_below_cohort_total", action="waiting")
        time.sleep(3.0)  # six deadlines of the empty round 2 pass
        idle = _round(dep, 2)
        assert idle.state == "open" and "waits for uploads (none yet)" in idle.error
        assert " WARNING " not in log.read_text()[offset:]
        samples = scrape(dep.metrics_url(0))
        assert value(samples, "starfish_rounds_below_cohort_total", action="waiting") == waited
        with dep.admin() as admin:
            job_id = admin.unlearn(["a"], parameters=PLUMBING_SCHEDULE)
        _until(lambda: _round(dep, 2).state == "abandoned", 15, "the empty round ends at once")
        with dep.admin() as admin:
            step = admin.job_status(job_id).step
        assert not step.startswith("waiting for"), step
        assert value(scrape(dep.metrics_url(0)), "starfish_rounds_below_cohort_total", action="abandoned") == 0
        dep.stop(1)
        _until(lambda: _health(dep, 0) == health_pb2.HealthCheckResponse.NOT_SERVING, 30, "party0 NOT_SERVING")
        assert _health(dep, 0, LIVENESS) == health_pb2.HealthCheckResponse.SERVING
        assert value(scrape(dep.metrics_url(0)), "starfish_not_ready", reason="peer_unreachable") == 1
    finally:
        dep.stop()
