"""Checkpoints of failed jobs: kept, adopted by an identical re-filed request, then removed.

A job that fails (its attempt budget used up without progress, or a party refusing) keeps
its checkpoints on both parties. A later request with the same targets, strategy and
parameters, starting from the same base model M_T, is the same computation: when it
starts, it adopts the newest such failed job's checkpoints (party0 moves them into the new
job's directory and names the failed job in StartJob; party1 does the same with its own
copy), and its first session attempt resumes from the newest checkpoint both parties hold
instead of unlearning round 0.

A failed job's checkpoints are removed, on both parties:

* when a re-filed identical job adopts them (moved, not copied);
* when they can no longer be adopted: the newest global model is no longer the failed
  job's base model (training committed a round, or another job installed its model), or
  a client was erased since (the stored history changed);
* `jobs.keep_failed_checkpoints_s` after the job failed (they hold shares of values
  derived from the remaining clients' gradients).
"""

from __future__ import annotations

import logging
import os
import shutil
import time

from mpc.durable import fsync_dir
from server.jobs.jobstore import JobRecord, JobStore

log = logging.getLogger(__name__)
ADOPTABLE_STATES = ("failed", "cancelled")  #: party1 records a failed job as cancelled by party0


def _checkpoints(jobs: JobStore, job_id: str):
    return jobs.root / job_id / "checkpoints"


def has_checkpoints(jobs: JobStore, job_id: str) -> bool:
    folder = _checkpoints(jobs, job_id)
    return folder.is_dir() and any(p.name.startswith("t") for p in folder.iterdir())


def same_request(a: JobRecord, b: JobRecord, base_model_hash: str) -> bool:
    """Same targets, strategy and parameters, and `a` ran from `base_model_hash`."""
    return (sorted(a.targets), a.strategy, a.parameters_json) == (
        sorted(b.targets),
        b.strategy,
        b.parameters_json,
    ) and a.base_model_hash == base_model_hash


def adoptable(jobs: JobStore, job: JobRecord, base_model_hash: str) -> JobRecord | None:
    """The newest failed job identical to `job` whose checkpoints are still here."""
    for old in reversed(jobs.all()):
        if old.job_id == job.job_id or old.state not in ADOPTABLE_STATES:
            continue
        if same_request(old, job, base_model_hash) and has_checkpoints(jobs, old.job_id):
            return old
    return None


def adopt_checkpoints(jobs: JobStore, old_id: str, job: JobRecord, base_model_hash: str) -> bool:
    """Move the failed job `old_id`'s checkpoints into `job` (if it is identical); True if moved."""
    old = jobs.get(old_id)
    if old is None or old.state not in ADOPTABLE_STATES or not same_request(old, job, base_model_hash):
        log.warning("job %s: cannot adopt the checkpoints of %s (not an identical failed job here)", job.job_id, old_id)
        return False
    source, target = _checkpoints(jobs, old_id), jobs.job_dir(job.job_id) / "checkpoints"
    if not has_checkpoints(jobs, old_id):
        return False
    if target.exists():
        shutil.rmtree(target)
    os.replace(source, target)
    fsync_dir(target.parent)
    fsync_dir(source.parent)
    jobs.update(job.job_id, adopted_from=old_id)
    log.info("job %s adopted the checkpoints of failed job %s", job.job_id, old_id)
    return True


def stale_failed(jobs: JobStore, base_model_hash: str, keep_s: float, any_base: bool = False) -> list[str]:
    """Failed jobs whose checkpoints can no longer be adopted (see the module docstring)."""
    now = time.time()
    out = []
    for job in jobs.all():
        if job.state not in ADOPTABLE_STATES or not has_checkpoints(jobs, job.job_id):
            continue
        expired = job.finished is not None and now - job.finished > keep_s
        if any_base or expired or job.base_model_hash != base_model_hash:
            out.append(job.job_id)
    return out


def remove_checkpoints(jobs: JobStore, job_id: str) -> None:
    shutil.rmtree(_checkpoints(jobs, job_id), ignore_errors=True)
    log.info("job %s: checkpoints of the failed job removed", job_id)
