"""Stage II as an admin user runs it (docs/JOBS.md): file an unlearn request with party0's
admin RPC, follow the job's status stream, then download the unlearned model and the report.

While the job runs, the remaining clients answer warm-up and correction tasks through the
SDK (`Fleet.serve_tasks`); the job pauses training, runs Starfish under 2PC in per-job
workers of both parties with the dealer, installs M̂ as the next global model, erases the
targets' shares and has both parties sign the erasure certificate, which is fetched here too.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from client_sdk.errors import StarfishError
from harness.local import LocalDeployment
from proto.starfish.v1 import admin_pb2

Say = Callable[[str], None]
#: a status line is printed when the step or round changes, or after this many seconds
STATUS_REPEAT_S = 15.0
FINAL_STATES = (admin_pb2.JOB_STATE_SUCCEEDED, admin_pb2.JOB_STATE_FAILED, admin_pb2.JOB_STATE_CANCELLED)
#: the federated evaluation's states that end it (docs/JOBS.md §7)
EVALUATION_ENDED = ("revealed", "not_enough_evaluators", "failed", "not_done", "off")
EVALUATION_POLL_S = 0.5


class UnlearnFailed(RuntimeError):
    """The unlearning job ended in a state other than SUCCEEDED."""


@dataclass
class UnlearnOutcome:
    """The unlearned model and what the job reported."""

    model: torch.Tensor  #: M̂ (flat float32)
    model_hash: str
    report: dict[str, Any]
    summary: str
    seconds: float
    job_id: str
    certificate_json: str  #: the signed erasure certificate (empty when the job has none)
    statuses: list[dict[str, Any]] = field(default_factory=list)  #: the job status stream as received


def _status_dict(s: admin_pb2.JobStatus, elapsed: float) -> dict[str, Any]:
    return {
        "elapsed_s": round(elapsed, 3),
        "state": admin_pb2.JobState.Name(s.state),
        "step": s.step,
        "unlearning_round": s.unlearning_round,
        "progress": s.progress,
        "seconds": s.seconds,
        "bytes": s.bytes,
        "error": s.error,
    }


def via_admin(
    dep: LocalDeployment, targets: tuple[str, ...], params: dict[str, Any], say: Say, timeout_s: float
) -> UnlearnOutcome:
    """File `Unlearn(targets, "starfish", params)` on party0 and follow the job to its end."""
    admin = dep.admin()
    start = time.perf_counter()
    statuses: list[dict[str, Any]] = []
    try:
        job_id = admin.unlearn(list(targets), "starfish", params)
        say(f"  job {job_id} filed with party0 (admin RPC Unlearn); status stream (admin RPC WatchJob):")
        last_key: tuple = ()
        last_print = 0.0
        final: admin_pb2.JobStatus | None = None
        for status in admin.watch_job(job_id, timeout_s):
            elapsed = time.perf_counter() - start
            statuses.append(_status_dict(status, elapsed))
            key = (status.state, status.step, status.unlearning_round)
            if key != last_key or elapsed - last_print >= STATUS_REPEAT_S:
                state = admin_pb2.JobState.Name(status.state).removeprefix("JOB_STATE_").lower()
                say(
                    f"  [{elapsed:6.1f} s] {state:<9} step {status.step or '-':<16} "
                    f"round {status.unlearning_round:>2}  {100 * status.progress:5.1f} %  {status.bytes / 1e6:9.1f} MB"
                )
                last_key, last_print = key, elapsed
            final = status
            if status.state in FINAL_STATES:
                break
        if final is None or final.state not in FINAL_STATES:
            final = admin.job_status(job_id)
        if final.state != admin_pb2.JOB_STATE_SUCCEEDED:
            raise UnlearnFailed(
                f"job {job_id} ended {admin_pb2.JobState.Name(final.state)}: {final.error or 'no detail'}"
            )
        header, params_out = admin.job_model(job_id)
        rep = admin.job_report(job_id)
        certificate = admin.job_certificate(job_id)
    except StarfishError as exc:
        raise UnlearnFailed(str(exc)) from None
    finally:
        admin.close()
    model = torch.from_numpy(np.asarray(params_out, dtype=np.float32).copy())
    return UnlearnOutcome(
        model,
        header.model_hash,
        json.loads(rep.report_json),
        rep.summary,
        time.perf_counter() - start,
        job_id,
        certificate.certificate_json,
        statuses,
    )


def await_evaluation(dep: LocalDeployment, outcome: UnlearnOutcome, say: Say, timeout_s: float) -> None:
    """Wait (clients still serving tasks) for the job's federated evaluation to end, then take
    the job report again, which now carries it (`outcome.report["federated_evaluation"]`)."""
    end = time.monotonic() + timeout_s
    with dep.admin() as admin:
        while True:
            section = admin.job_status(outcome.job_id).federated_evaluation
            if section.state in EVALUATION_ENDED or time.monotonic() > end:
                break
            time.sleep(EVALUATION_POLL_S)
        outcome.report = json.loads(admin.job_report(outcome.job_id).report_json)
    say(f"  federated evaluation ({section.state or 'not started'}): {section.summary}")
