"""Durable record of unlearning jobs on one party: `jobs.sqlite` in the party's data dir.

Job states: queued → running → succeeded | failed | cancelled. One job runs at a time;
queued jobs start in the order they were filed. Party0 decides the order; party1 records
the jobs party0 starts on it. Each job has a directory `jobs/<job_id>/` for its worker
specs, checkpoints, logs, result and report.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from server.file_modes import private_dir, private_sqlite_path

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
  job_id TEXT PRIMARY KEY, seq INTEGER NOT NULL, targets TEXT NOT NULL, strategy TEXT NOT NULL,
  parameters TEXT NOT NULL, state TEXT NOT NULL, step TEXT NOT NULL DEFAULT '',
  unlearning_round INTEGER NOT NULL DEFAULT 0, total_rounds INTEGER NOT NULL DEFAULT 0,
  bytes INTEGER NOT NULL DEFAULT 0, base_round INTEGER NOT NULL DEFAULT -1,
  base_model_hash TEXT NOT NULL DEFAULT '', attempts INTEGER NOT NULL DEFAULT 0,
  rendezvous TEXT NOT NULL DEFAULT '', model_hash TEXT NOT NULL DEFAULT '',
  error TEXT NOT NULL DEFAULT '', created REAL NOT NULL, started REAL, finished REAL);
"""
#: columns added after the first schema, with their SQL type: `_migrate` adds them to an older table
ADDED_COLUMNS = {
    "failures": "INTEGER NOT NULL DEFAULT 0",
    "checkpoint_round": "INTEGER NOT NULL DEFAULT 0",
    "progress_round": "INTEGER NOT NULL DEFAULT 0",
    "last_error": "TEXT NOT NULL DEFAULT ''",
    "failed_process": "TEXT NOT NULL DEFAULT ''",
    "adopted_from": "TEXT NOT NULL DEFAULT ''",
    "worker_exit": "INTEGER",
    "rebased": "INTEGER NOT NULL DEFAULT 0",
    "dequeued": "REAL",
}
TERMINAL = ("succeeded", "failed", "cancelled")
COLUMNS = (
    "job_id",
    "seq",
    "targets",
    "strategy",
    "parameters",
    "state",
    "step",
    "unlearning_round",
    "total_rounds",
    "bytes",
    "base_round",
    "base_model_hash",
    "attempts",
    "rendezvous",
    "model_hash",
    "error",
    "created",
    "started",
    "finished",
    *ADDED_COLUMNS,
)


@dataclass(frozen=True)
class JobRecord:
    job_id: str
    seq: int
    targets: tuple[str, ...]
    strategy: str
    parameters: dict[str, Any]
    state: str
    step: str
    unlearning_round: int
    total_rounds: int
    bytes: int
    base_round: int
    base_model_hash: str
    attempts: int
    rendezvous: str
    model_hash: str
    error: str
    created: float
    started: float | None
    finished: float | None
    #: failed session attempts since the job last made progress (a new common checkpoint)
    failures: int = 0
    #: newest unlearning round this party checkpointed
    checkpoint_round: int = 0
    #: the common checkpoint (both parties) when the job last made progress
    progress_round: int = 0
    #: why the last failed attempt failed, and which process failed
    last_error: str = ""
    failed_process: str = ""
    #: the failed identical job whose checkpoints this one took over
    adopted_from: str = ""
    #: exit code of this party's last worker once it exited (negative: killed by a signal)
    worker_exit: int | None = None
    #: times party0 ran the job again from a newer M_T (a training round committed during it)
    rebased: int = 0
    #: when party0's job manager took the job from the queue (it then waits for the open training round)
    dequeued: float | None = None

    @property
    def progress(self) -> float:
        if self.state == "succeeded":
            return 1.0
        return self.unlearning_round / self.total_rounds if self.total_rounds else 0.0

    @property
    def seconds(self) -> float:
        if self.started is None:
            return 0.0
        return (self.finished or time.time()) - self.started

    @property
    def parameters_json(self) -> str:
        """The canonical JSON the table stores (sorted keys, so it reads back to the same text)."""
        return json.dumps(self.parameters, sort_keys=True)


def new_job_id() -> str:
    """A fresh job id (CSPRNG, 12 hex digits; safe in file names and task ids)."""
    return "j" + secrets.token_hex(6)


class JobStore:
    """Thread-safe job table of one party."""

    def __init__(self, data_dir: Path):
        self.root = Path(data_dir) / "jobs"
        private_dir(self.root)
        self._lock = threading.RLock()
        db_path = private_sqlite_path(self.root / "jobs.sqlite")
        self._db = sqlite3.connect(db_path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(SCHEMA)
        self._migrate()

    def _migrate(self) -> None:
        """Add the columns a job table written by an older version lacks."""
        have = {row[1] for row in self._db.execute("PRAGMA table_info(jobs)")}
        for name, sql_type in ADDED_COLUMNS.items():
            if name not in have:
                self._db.execute(f"ALTER TABLE jobs ADD COLUMN {name} {sql_type}")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def job_dir(self, job_id: str) -> Path:
        return private_dir(self.root / job_id)

    def _rows(self, where: str = "", args: tuple = ()) -> list[JobRecord]:
        with self._lock:
            rows = self._db.execute(f"SELECT {', '.join(COLUMNS)} FROM jobs {where}", args).fetchall()
        out = []
        for r in rows:
            d = dict(zip(COLUMNS, r, strict=True))
            d["targets"] = tuple(json.loads(d["targets"]))
            d["parameters"] = json.loads(d["parameters"])
            out.append(JobRecord(**d))
        return out

    def add(
        self, job_id: str, targets: list[str], strategy: str, parameters_json: str, state: str = "queued"
    ) -> JobRecord:
        """Record a new job (idempotent for the same id and content); `parameters_json` is the
        canonical JSON of its parameters (`server.jobs.validation.parse_request`), stored as is."""
        with self._lock:
            existing = self.get(job_id)
            if existing is not None:
                if (list(existing.targets), existing.strategy, existing.parameters_json) != (
                    targets,
                    strategy,
                    parameters_json,
                ):
                    raise ValueError(f"job {job_id} already exists with other parameters")
                return existing
            seq = self._db.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM jobs").fetchone()[0]
            self._db.execute(
                "INSERT INTO jobs (job_id, seq, targets, strategy, parameters, state, created) VALUES (?,?,?,?,?,?,?)",
                (
                    job_id,
                    seq,
                    json.dumps(targets),
                    strategy,
                    parameters_json,
                    state,
                    time.time(),
                ),
            )
        return self.get(job_id)  # type: ignore[return-value]

    def get(self, job_id: str) -> JobRecord | None:
        rows = self._rows("WHERE job_id=?", (job_id,))
        return rows[0] if rows else None

    def all(self) -> list[JobRecord]:
        return self._rows("ORDER BY seq")

    def queued(self) -> list[JobRecord]:
        return self._rows("WHERE state='queued' ORDER BY seq")

    def next_job(self) -> JobRecord | None:
        """The job to work on: a running one (after a restart), else the oldest queued one."""
        rows = self._rows("WHERE state='running' ORDER BY seq LIMIT 1") or self._rows(
            "WHERE state='queued' ORDER BY seq LIMIT 1"
        )
        return rows[0] if rows else None

    def update(self, job_id: str, **values: Any) -> None:
        unknown = set(values) - set(COLUMNS)
        if unknown:
            raise KeyError(f"unknown job column(s) {sorted(unknown)}")
        if not values:
            return
        sets = ", ".join(f"{k}=?" for k in values)
        with self._lock:
            self._db.execute(f"UPDATE jobs SET {sets} WHERE job_id=?", (*values.values(), job_id))

    def finish(self, job_id: str, state: str, error: str = "", model_hash: str = "") -> None:
        if state not in TERMINAL:
            raise ValueError(f"{state!r} is not a final job state")
        self.update(job_id, state=state, error=error, model_hash=model_hash, finished=time.time())
