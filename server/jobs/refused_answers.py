"""The task answers of a job refused by the input check (docs/JOBS.md §4): one JSON file in
the job directory, read by the job report and JobStatus.

A refused answer is treated as a missing one (the client keeps its estimate for that step,
as for a dropout); this file is where it is named, with the step and the failed checks.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from mpc import durable

FILE = "refused-answers.json"
_lock = threading.Lock()


def record(job_dir: Path, entries: list[dict[str, Any]]) -> None:
    """Append entries {client, task_id, unlearning_round, task, reason} (atomically replaced)."""
    with _lock:
        path = job_dir / FILE
        merged = read(job_dir) + entries
        durable.atomic_write(path, json.dumps(merged, indent=1).encode("utf-8"))


def read(job_dir: Path) -> list[dict[str, Any]]:
    path = job_dir / FILE
    return json.loads(path.read_text()) if path.exists() else []


def clients(job_dir: Path) -> list[str]:
    """The clients with at least one refused answer, sorted."""
    return sorted({entry["client"] for entry in read(job_dir)})
