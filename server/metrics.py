"""Operator metrics of a party process, served for Prometheus (`[observability] metrics_listen`).

The service records what it does through the hook functions below (one per event); the
metrics live in this module's registry and are exported at ``GET /metrics`` on the
configured address only. Nothing secret is a label or a value: client ids never appear
(a label per client would also grow without bound), only counts, sizes and durations.

| metric | type | meaning |
| --- | --- | --- |
| starfish_party_info{party} | gauge | 1; names the party |
| starfish_rounds_committed_total | counter | training rounds committed here |
| starfish_last_committed_round | gauge | index of the newest committed round |
| starfish_round_members | histogram | agreed members per committed round |
| starfish_rounds_failed_total | counter | rounds failed (model hash mismatch, peer refused) |
| starfish_training_halted | gauge | 1 while the newest round is failed (training stopped) |
| starfish_rounds_below_cohort_total{action} | counter | rounds below k, by action (not rounds without uploads) |
| starfish_not_ready{reason} | gauge | 1 while health is NOT_SERVING, by reason (server.readiness) |
| starfish_uploads_accepted_total{kind,duplicate} | counter | uploads stored (kind: round, task) |
| starfish_uploads_refused_total{kind,reason} | counter | uploads refused, by reason |
| starfish_share_pair_mismatches_total{reason} | counter | clients excluded: their two shares are not one pair |
| starfish_validation_enabled | gauge | 1 when uploads and task answers are checked in 2PC (`[validation]`), else 0 |
| starfish_inputs_refused_total{kind,check} | counter | inputs refused by the 2PC check (kind: round, task) |
| starfish_input_check_batches_total{outcome} | counter | check batches: completed, failed (retried) |
| starfish_peer_up | gauge | party0: 1 after a peer call succeeded, 0 after a failure (NaN before the first) |
| starfish_peer_call_failures_total{method,code} | counter | party0: failed peer calls |
| starfish_peer_last_contact_timestamp_seconds | gauge | party1: when party0 last called |
| starfish_rpc_requests_total{method} | counter | RPCs received, by method |
| starfish_job_attempts_total | counter | 2PC session attempts started |
| starfish_job_attempt_failures_total | counter | session attempts that failed (each is retried) |
| starfish_jobs_finished_total{state} | counter | jobs ended: succeeded, failed |
| starfish_job_running | gauge | 1 while a job's session runs here |
| starfish_jobs_queued | gauge | jobs waiting (party0) |
| starfish_job_duration_seconds | histogram | wall time of finished jobs |
| starfish_mpc_step_seconds{step} | histogram | wall time of each protocol step of a finished job |
| starfish_mpc_step_bytes_total{step,phase} | counter | bytes per step: online (party↔party), offline (dealer) |
| starfish_clients_erased_total | counter | client erasures carried out here |
| starfish_certificates_total{outcome} | counter | erasure certificates: signed, unsigned, refused, invalid |
| starfish_store_bytes{kind} | gauge | bytes on disk: shares, tasks, models, database |
| starfish_store_free_bytes | gauge | free bytes of the file system holding the data dir |
| starfish_store_min_free_bytes | gauge | `[limits] min_free_bytes`: below it no round opens |
| starfish_storage_faults_total{kind} | counter | writes that failed: full (disk full), unwritable (read-only, I/O) |
| starfish_certificate_expiry_timestamp_seconds{use} | gauge | expiry (unix time) of: tls, ca, signing |
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, start_http_server
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from mpc.plane.certificate_authority import not_after

log = logging.getLogger(__name__)
disable_created_metrics()  # no `_created` series beside every counter and histogram
REGISTRY = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)

STORE_SIZE_CACHE_S = 15.0  #: the store is walked at most this often (scrapes in between reuse the sizes)
_SECONDS = (0.1, 0.5, 1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200)
_kw: dict[str, Any] = {"registry": REGISTRY}

PARTY = Gauge("starfish_party_info", "1, labelled with this party's name", ["party"], **_kw)
ROUNDS_COMMITTED = Counter("starfish_rounds_committed", "training rounds committed", **_kw)
LAST_ROUND = Gauge("starfish_last_committed_round", "index of the newest committed round", **_kw)
ROUND_MEMBERS = Histogram(
    "starfish_round_members", "agreed members per committed round", buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500), **_kw
)
ROUNDS_FAILED = Counter("starfish_rounds_failed", "training rounds failed (training halts)", **_kw)
BELOW_COHORT = Counter(
    "starfish_rounds_below_cohort", "rounds that would close below the minimum cohort, by action", ["action"], **_kw
)
HALTED = Gauge("starfish_training_halted", "1 while the newest round is failed", **_kw)
UPLOADS = Counter("starfish_uploads_accepted", "uploads stored", ["kind", "duplicate"], **_kw)
REFUSED = Counter("starfish_uploads_refused", "uploads refused", ["kind", "reason"], **_kw)
MISMATCHES = Counter(
    "starfish_share_pair_mismatches", "clients excluded: their two shares do not form a pair", ["reason"], **_kw
)
VALIDATION = Gauge("starfish_validation_enabled", "1 when inputs are checked in 2PC before use", **_kw)
INPUTS_REFUSED = Counter(
    "starfish_inputs_refused", "inputs refused by the 2PC input check, per failed check", ["kind", "check"], **_kw
)
CHECK_BATCHES = Counter("starfish_input_check_batches", "input check batches by outcome", ["outcome"], **_kw)
PEER_UP = Gauge("starfish_peer_up", "1 after a successful call to the other party, 0 after a failed one", **_kw)
PEER_FAILURES = Counter("starfish_peer_call_failures", "failed calls to the other party", ["method", "code"], **_kw)
PEER_CONTACT = Gauge("starfish_peer_last_contact_timestamp_seconds", "unix time of the last call from party0", **_kw)
RPCS = Counter("starfish_rpc_requests", "RPCs received", ["method"], **_kw)
ATTEMPTS = Counter("starfish_job_attempts", "2PC session attempts started", **_kw)
ATTEMPT_FAILURES = Counter("starfish_job_attempt_failures", "2PC session attempts that failed", **_kw)
JOBS_FINISHED = Counter("starfish_jobs_finished", "unlearning jobs ended", ["state"], **_kw)
JOB_RUNNING = Gauge("starfish_job_running", "1 while an unlearning job's session runs here", **_kw)
JOBS_QUEUED = Gauge("starfish_jobs_queued", "unlearning jobs waiting to start", **_kw)
JOB_SECONDS = Histogram("starfish_job_duration_seconds", "wall time of finished jobs", buckets=_SECONDS, **_kw)
STEP_SECONDS = Histogram(
    "starfish_mpc_step_seconds", "protocol step wall time per job", ["step"], buckets=_SECONDS, **_kw
)
STEP_BYTES = Counter("starfish_mpc_step_bytes", "protocol step bytes", ["step", "phase"], **_kw)
ERASED = Counter("starfish_clients_erased", "client erasures carried out", **_kw)
CERTIFICATES = Counter("starfish_certificates", "erasure certificates by outcome", ["outcome"], **_kw)
NOT_READY = Gauge("starfish_not_ready", "1 while the party cannot make progress, by reason", ["reason"], **_kw)
STORE_BYTES = Gauge("starfish_store_bytes", "bytes of the store on disk", ["kind"], **_kw)
FREE_BYTES = Gauge("starfish_store_free_bytes", "free bytes of the file system holding the data dir", **_kw)
MIN_FREE_BYTES = Gauge("starfish_store_min_free_bytes", "free bytes below which no round opens", **_kw)
STORAGE_FAULTS = Counter("starfish_storage_faults", "store writes that failed, by kind", ["kind"], **_kw)
CERT_EXPIRY = Gauge(
    "starfish_certificate_expiry_timestamp_seconds", "unix time at which a certificate expires", ["use"], **_kw
)


# -- hooks (called by the service) ---------------------------------------------------------
def round_committed(round_index: int, members: int) -> None:
    ROUNDS_COMMITTED.inc()
    LAST_ROUND.set(round_index)
    ROUND_MEMBERS.observe(members)


def round_failed() -> None:
    ROUNDS_FAILED.inc()


#: label values of `starfish_rounds_below_cohort_total` (server.cohort)
COHORT_ACTIONS = ("waiting", "abandoned", "refused")


def not_ready(reason: str) -> None:
    """Why the party cannot make progress now ("" when it can: no sample; server.readiness)."""
    NOT_READY.clear()
    if reason:
        NOT_READY.labels(reason).set(1)


def round_below_cohort(action: str) -> None:
    """A round would have closed with fewer members than its minimum cohort; `action` is
    one of COHORT_ACTIONS (counts only: never a client id, share or mask)."""
    BELOW_COHORT.labels(action if action in COHORT_ACTIONS else "other").inc()


def upload_accepted(kind: str, duplicate: bool) -> None:
    UPLOADS.labels(kind, str(duplicate).lower()).inc()


def upload_refused(kind: str, reason: str) -> None:
    REFUSED.labels(kind, reason).inc()


#: label values of `starfish_share_pair_mismatches_total` (anything else is counted as "other")
MISMATCH_REASONS = ("one_sided", "n_samples", "unbound", "binding")


def share_pair_mismatch(round_index: int, client: str, reason: str, detail: str = "") -> None:
    """A client left out of round `round_index` because its two shares are not two halves of
    one sharing. `reason` is one of MISMATCH_REASONS (upload at one party only, different
    n_j, no binding to check, bindings differ) — a short code, so the label stays bounded;
    `detail` goes to the log line (WARNING) with the client and round."""
    MISMATCHES.labels(reason if reason in MISMATCH_REASONS else "other").inc()
    log.warning("round %d: upload of %s excluded: %s (share pair mismatch: %s)", round_index, client, detail, reason)


def validation_enabled(enabled: bool) -> None:
    VALIDATION.set(1 if enabled else 0)


#: label values of `starfish_inputs_refused_total{check}` (mpc.input_check.CHECKS)
INPUT_CHECKS = ("range", "norm", "reported_norm", "delta")


def input_refused(kind: str, failed: tuple[str, ...]) -> None:
    """An upload (kind "round") or task answer ("task") was refused by the input check."""
    for check in failed:
        INPUTS_REFUSED.labels(kind, check if check in INPUT_CHECKS else "other").inc()


def check_batch(outcome: str) -> None:
    """A check batch ended: "completed" or "failed" (nothing decided; retried)."""
    CHECK_BATCHES.labels(outcome).inc()


def peer_call(method: str, code: str | None) -> None:
    """party0's call to party1 ended: `code` None on success, else the status name."""
    if code is None:
        PEER_UP.set(1)
        return
    PEER_FAILURES.labels(method, code).inc()
    if code in ("UNAVAILABLE", "DEADLINE_EXCEEDED"):
        PEER_UP.set(0)


def rpc_received(method: str, from_peer: bool) -> None:
    RPCS.labels(method).inc()
    if from_peer:
        PEER_CONTACT.set(time.time())


def job_attempt_started() -> None:
    ATTEMPTS.inc()
    JOB_RUNNING.set(1)


def job_attempt_failed() -> None:
    ATTEMPT_FAILURES.inc()


def job_finished(state: str, seconds: float) -> None:
    JOBS_FINISHED.labels(state).inc()
    JOB_RUNNING.set(0)
    if state == "succeeded":
        JOB_SECONDS.observe(seconds)


def job_costs(costs: Mapping[str, Mapping[str, float]]) -> None:
    """Per-step time and bytes of a finished job (the job report's `costs`)."""
    for step, cost in costs.items():
        STEP_SECONDS.labels(step).observe(float(cost.get("seconds", 0.0)))
        for phase in ("online", "offline"):
            STEP_BYTES.labels(step, phase).inc(int(cost.get(f"{phase}_bytes", 0)))


def storage_fault(kind: str) -> None:
    """A write failed: `full` (no space) or `unwritable` (read-only, I/O error); retried."""
    STORAGE_FAULTS.labels(kind).inc()


def client_erased() -> None:
    ERASED.inc()


def certificate_outcome(outcome: str) -> None:
    CERTIFICATES.labels(outcome).inc()


# -- values read at scrape time ------------------------------------------------------------
class _StoreSizes:
    """Bytes per kind of file under a data dir, walked at most every STORE_SIZE_CACHE_S."""

    KINDS = ("shares", "tasks", "models")  #: sub-directories of the data dir, one gauge label each

    def __init__(self, root: Path):
        self.root = Path(root)
        self.lock = threading.Lock()
        self.at = 0.0
        self.sizes: dict[str, int] = {}

    @staticmethod
    def _walk(path: Path) -> int:
        total = 0
        stack = [str(path)]
        while stack:
            try:
                with os.scandir(stack.pop()) as it:
                    for entry in it:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(entry.path)
                        elif entry.is_file(follow_symlinks=False):
                            total += entry.stat(follow_symlinks=False).st_size
            except FileNotFoundError:
                continue
        return total

    def get(self, kind: str) -> float:
        with self.lock:
            if time.monotonic() - self.at > STORE_SIZE_CACHE_S:
                self.sizes = {kind: self._walk(self.root / kind) for kind in self.KINDS}
                self.sizes["database"] = sum(p.stat().st_size for p in self.root.glob("meta.sqlite*"))
                self.at = time.monotonic()
            return float(self.sizes.get(kind, 0))


def _free_bytes(data_dir: Path) -> float:
    try:
        return float(shutil.disk_usage(data_dir).free)
    except OSError:
        return float("nan")


def bind(
    party: str, data_dir: Path, halted: Callable[[], bool], queued: Callable[[], int], min_free_bytes: int = 0
) -> None:
    """Attach this party's name and its scrape-time values (store sizes, halted, queue).

    Each party exports only its side of the peer link: party0 `starfish_peer_up` (NaN until
    its first call to party1, so no alert fires before there is anything to say), party1
    `starfish_peer_last_contact_timestamp_seconds`."""
    PARTY.labels(party).set(1)
    REGISTRY.unregister(PEER_CONTACT if party == "party0" else PEER_UP)
    PEER_UP.set(float("nan"))
    sizes = _StoreSizes(data_dir)
    for kind in (*_StoreSizes.KINDS, "database"):
        STORE_BYTES.labels(kind).set_function(lambda k=kind: sizes.get(k))
    FREE_BYTES.set_function(lambda: _free_bytes(data_dir))
    MIN_FREE_BYTES.set(min_free_bytes)
    HALTED.set_function(lambda: float(halted()))
    JOBS_QUEUED.set_function(lambda: float(queued()))


def _expiry(path: Path) -> float:
    try:
        return not_after(path)
    except (OSError, ValueError):
        return float("nan")  # missing or unreadable: the scrape says so instead of failing


def watch_certificates(files: Mapping[str, Path | None]) -> None:
    """Export the expiry time of each certificate file by use (tls, ca, signing), read at
    scrape time; the alert StarfishCertificateExpiring fires ahead of it."""
    for use, path in files.items():
        if path is not None:
            CERT_EXPIRY.labels(use).set_function(lambda p=Path(path): _expiry(p))


def serve(listen: str, certfile: Path | None = None, keyfile: Path | None = None):
    """Serve GET /metrics on `listen` (host:port; TLS with the given certificate and key)."""
    host, _, port = listen.rpartition(":")
    server, _thread = start_http_server(
        int(port),
        addr=host.strip("[]"),
        registry=REGISTRY,
        certfile=str(certfile) if certfile else None,
        keyfile=str(keyfile) if keyfile else None,
    )
    log.info("metrics on %s://%s/metrics", "https" if certfile else "http", listen)
    return server
