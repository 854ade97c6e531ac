"""Whether this party can make progress, as its gRPC health service reports it.

The client/admin port serves grpc.health.v1 with two services (docs/OPERATIONS.md, "Health"):

* "" — what a probe asks by default: SERVING while the party can make progress, NOT_SERVING
  while it cannot, for one of these reasons (checked every CHECK_S seconds, first at start):
  - `peer_unreachable`: the other party's peer port does not complete a (mutual TLS)
    connection within PROBE_S;
  - `store_unwritable`: a probe file cannot be written and synced in the data directory;
  - `training_halted`: the newest training round failed (training does not resume by itself);
  - `dealer_unreachable`: a job waits for a dealer service that does not answer;
* LIVENESS — SERVING while the process serves at all (what `starfish up` waits for).

Until the first check "" is NOT_SERVING (reason `starting`). The reason is logged when
progress has stopped for two checks in a row (WARNING) and when it resumes (INFO), and
exported as `starfish_not_ready{reason}` = 1 (no sample while ready).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2

from mpc import durable
from server import metrics

log = logging.getLogger(__name__)
LIVENESS = "starfish.liveness"
CHECK_S = 5.0
PROBE_S = 3.0
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING

#: a check: None when fine, else (reason code, one-line explanation)
Check = Callable[[], "tuple[str, str] | None"]


def peer_check(channel: grpc.Channel, address: str) -> Check:
    def check() -> tuple[str, str] | None:
        try:
            grpc.channel_ready_future(channel).result(timeout=PROBE_S)
        except grpc.FutureTimeoutError:
            return "peer_unreachable", f"the other party's peer port {address} does not answer"
        return None

    return check


def store_check(data_dir: Path) -> Check:
    def check() -> tuple[str, str] | None:
        try:
            durable.write_temp(Path(data_dir), b"health").unlink()
        except OSError as exc:
            return "store_unwritable", f"the store {data_dir} is not writable: {exc.strerror or exc}"
        return None

    return check


class Readiness:
    """Runs the checks in a thread and keeps the health service's "" status in step."""

    def __init__(self, servicer: health.HealthServicer, checks: list[Check], stopping: threading.Event) -> None:
        self.servicer = servicer
        self.checks = checks
        self.stopping = stopping
        self.reason = "starting"  #: "" while ready
        self._last = ""  #: the reason of the previous check
        self._logged = ""  #: the reason last logged as a warning
        self.thread = threading.Thread(target=self._run, name="readiness", daemon=True)

    def start(self) -> None:
        self.servicer.set(LIVENESS, SERVING)
        self.servicer.set("", NOT_SERVING)
        self.thread.start()

    def check_now(self) -> tuple[str, str] | None:
        """The first failing check's (reason, explanation), or None when the party can progress."""
        for check in self.checks:
            try:
                found = check()
            except Exception as exc:  # a failing check must not end the thread: report it
                log.exception("health check failed")
                found = ("check_failed", f"a health check failed: {exc}")
            if found is not None:
                return found
        return None

    def _run(self) -> None:
        while not self.stopping.is_set():
            found = self.check_now()
            if self.stopping.is_set():
                return  # the graceful shutdown owns the health status now
            self._publish(found)
            self.stopping.wait(CHECK_S)

    def _publish(self, found: tuple[str, str] | None) -> None:
        """Set the status now; log a stop of progress once it held for two checks in a row
        (so a peer that starts a moment later is not a warning), and its end."""
        reason = found[0] if found else ""
        if found and reason == self._last and reason != self._logged:
            log.warning("health NOT_SERVING (%s): %s", *found)
            self._logged = reason
        elif not found and self._logged:
            log.info("health SERVING: the party can make progress again")
            self._logged = ""
        self._last = self.reason = reason
        metrics.not_ready(reason)
        self.servicer.set("", NOT_SERVING if found else SERVING)
