"""The job report (JSON) and its rendered summary.

The report is the strategy's own report (selected rounds, flags, corrections, ARP,
per-step time and bytes offline/online, revealed values, Theorem 1 inputs; docs/JOBS.md §8)
from party0's worker, plus the job's facts, which dealer served each session attempt
(address, certificate identity and sha256 fingerprint, as party0's worker authenticated
it; and whether the deployment declares it independent), and both parties' erasure
receipts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from server.jobs.jobstore import JobRecord
from unlearning.distributed_dp import Release
from unlearning.dp_accounting import privacy_report


def dealer_record(job_dir: Path, label: str, independent: bool) -> dict[str, Any]:
    """The report's `dealer` section from the sessions party0's worker recorded."""
    path = job_dir / "sessions.json"
    sessions = json.loads(path.read_text()) if path.exists() else []
    return {"label": label, "independent": independent, "sessions": sessions}


def build_report(
    job_dir: Path,
    job: JobRecord,
    model_hash: str,
    receipts: dict[str, list[dict[str, Any]]],
    finished: float,
    dealer: dict[str, Any],
    stage1: list[Release] | None = None,
) -> dict[str, Any]:
    """The report (module docstring); `stage1`: the noised Stage I rounds this party logged."""
    stage1 = stage1 or []
    report = json.loads((job_dir / "worker-report.json").read_text())
    report["job"] = {
        "job_id": job.job_id,
        "targets": list(job.targets),
        "strategy": job.strategy,
        "parameters": job.parameters,
        "base_round": job.base_round,
        "base_model_hash": job.base_model_hash,
        "new_global_round": job.base_round + 1,
        "model_hash": model_hash,
        "session_attempts": job.attempts,
        "created": job.created,
        "started": job.started,
        "finished": finished,
        "seconds": finished - (job.started or finished),
    }
    report["dealer"] = dealer
    report["erasure"] = receipts
    report["privacy"] = privacy_section(report.pop("dp", None), stage1)
    return report


def privacy_section(dp: dict[str, Any] | None, stage1: list[Release]) -> dict[str, Any]:
    """(ε, δ) per client and for the job over the noised Stage I rounds and this job's
    Stage II releases (`unlearning.dp_accounting`); {"dp": False} when the job ran without DP."""
    if dp is None:
        return {"dp": False}
    stage2 = [Release(e["label"], float(e["noise_multiplier"]), tuple(e["members"])) for e in dp["releases"]]
    return {
        "dp": True,
        "settings": dp["settings"],
        **privacy_report([*stage1, *stage2], float(dp["settings"]["delta"])),
    }


def _mb(n: float) -> str:
    return f"{n / 1e6:.2f} MB"


def render_summary(report: dict[str, Any]) -> str:
    """A few lines an operator reads: what was unlearned, how, at what cost, what was erased."""
    job = report["job"]
    sel = report["selection"]
    lines = [
        f"job {job['job_id']}: unlearned {', '.join(job['targets'])} with {job['strategy']} "
        f"in {job['seconds']:.1f} s ({job['session_attempts']} session attempt(s))",
        f"model {job['model_hash'][:16]} is global model {job['new_global_round']}",
        f"dealer: {report['dealer']['label']}; sessions served by "
        + ", ".join(
            f"{s['dealer_identity']} ({s['dealer_certificate_sha256'][:16]})" for s in report["dealer"]["sessions"]
        ),
        f"selected rounds ({sel['method']}): {sel['selected_rounds']} of {report['stored_rounds']}",
        f"flag checks: {len(report['flags'])}; corrections answered {report['corrections']['answered']}, "
        f"missing {report['corrections']['missing']}; ARP {report['arp_percent']:.1f} %",
        "step        seconds   online      offline",
    ]
    for name, cost in sorted(report["costs"].items()):
        lines.append(
            f"{name:<10} {cost['seconds']:8.2f}   {_mb(cost['online_bytes']):>10}  {_mb(cost['offline_bytes']):>10}"
        )
    privacy = report.get("privacy") or {}
    if privacy.get("dp"):
        lines.append(
            f"differential privacy: job ε = {privacy['epsilon']} at δ = {privacy['delta']:g} "
            f"({len(privacy['releases'])} noised releases, {privacy['accountant']})"
        )
    cert = report.get("certificate") or {}
    if cert.get("status") == "signed":
        lines.append(
            f"erasure certificate signed by party0 and party1 (statement sha256 {cert['statement_sha256'][:16]})"
        )
    elif cert:
        lines.append(f"erasure certificate {cert.get('status')}: {cert.get('detail', '')}")
    for target, parts in sorted(report["erasure"].items()):
        for r in parts:
            lines.append(
                f"erased {target} on party{r['party']}: {len(r['rounds'])} rounds, {r['files_deleted']} files, "
                f"{r['bytes_deleted']} bytes, {r['rows_deleted']} rows"
            )
    return "\n".join(lines) + "\n"
