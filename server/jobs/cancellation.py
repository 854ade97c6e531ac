"""Cancelling an unlearning job (admin CancelJob, docs/JOBS.md §7) and the record it leaves.

A queued job is cancelled at once. A running job is cancelled by party0's job manager at its
next check (every `jobs.poll_s`): its worker is killed (the dealer then ends the session, one
party having left it), party1 is told to stop its worker and drop its checkpoints (peer
CancelJob), party0 drops its own, and training resumes. A job that has installed its
unlearned model is past the point of cancelling: it erases its targets and finishes.

The job's directory keeps a report of the cancellation (`report.json`, `summary.txt`):
who asked, when, at which step and unlearning round the job was.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from server.jobs.jobstore import JobRecord

CANCELLED_BY_ADMIN = "cancelled by the admin"  #: the job's error once cancelled (JobStatus.error)
#: why a cancelled job has no erasure certificate (admin GetJobCertificate)
CANCELLED_NOTHING_ERASED = "the job was cancelled before it installed a model, so it erased nothing to certify"


class JobCancelled(Exception):
    """Raised in party0's job manager at the next check after the admin cancelled the running job."""


def cancellation_report(job: JobRecord, cancelled_at: float) -> dict[str, Any]:
    """The report of a cancelled job: its request and how far it went."""
    return {
        "job": {
            "job_id": job.job_id,
            "state": "cancelled",
            "targets": list(job.targets),
            "strategy": job.strategy,
            "parameters": job.parameters,
            "created": job.created,
            "started": job.started,
            "cancelled_at": cancelled_at,
            "step_at_cancel": job.step,
            "unlearning_round_at_cancel": job.unlearning_round,
            "session_attempts": job.attempts,
            "base_round": job.base_round,
        },
        "cancellation": {"by": "admin", "reason": CANCELLED_BY_ADMIN},
    }


def write_cancellation_report(folder: Path, job: JobRecord) -> None:
    """Write `report.json` and `summary.txt` of a cancelled job into its directory."""
    report = cancellation_report(job, time.time())
    (folder / "report.json").write_text(json.dumps(report, indent=1, sort_keys=True))
    entry = report["job"]
    where = f"at step {entry['step_at_cancel']!r}" if entry["step_at_cancel"] else "before it started"
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(entry["cancelled_at"]))
    (folder / "summary.txt").write_text(
        f"job {job.job_id}: unlearning of {', '.join(job.targets)} with {job.strategy} "
        f"{CANCELLED_BY_ADMIN} at {when}, {where} (unlearning round {entry['unlearning_round_at_cancel']}, "
        f"{entry['session_attempts']} session attempt(s)); nothing was erased, training resumed\n"
    )
