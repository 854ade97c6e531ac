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

from privacy.accountant import privacy_report
from privacy.release_log import Release
from server.jobs import refused_answers
from server.jobs.jobstore import JobRecord
from unlearning.report_sections import revealed_kind


def dealer_record(job_dir: Path, label: str, independent: bool) -> dict[str, Any]:
    """The report's `dealer` section from the sessions party0's worker recorded."""
    path = job_dir / "sessions.json"
    sessions = json.loads(path.read_text()) if path.exists() else []
    return {"label": label, "independent": independent, "sessions": sessions}


#: cohort of every value of a kind the strategy reports: "remaining" (the remaining clients),
#: "history" (every client of the stored rounds) or a number; bits about one client each are 1
KIND_COHORTS: dict[str, str | int] = {
    "selected_rounds": "history",
    "correction_flags": 1,
    "curvature_bits": 1,
    "sample_decided_bits": 1,
    "secmi_masked_products": "remaining",
}


def _aggregates(rounds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per revealed Ĝ_t: its unlearning round, stored round and cohort (its clients)."""
    return [
        {"t": e["t"], "round": e["round"], "cohort": int(e.get("cohort", e["participants"])), "epsilon": None}
        for e in rounds
        if e.get("kind") != "skipped" and e.get("revealed", True)
    ]


def revealed_section(report: dict[str, Any], stage1: dict[int, int], remaining: int, targets: int) -> dict[str, Any]:
    """The report's `revealed` section (docs/PRIVACY.md, "What is published"): the strategy's
    kinds, each with its `cohort` (the fewest clients any of its values aggregates; null when
    the strategy does not say) and `epsilon` (the DP budget spent; null without DP), the
    revealed aggregates one by one (`published`), and the public models the job relied on
    (`stage1_models`, |S_i| per stored round) and produced (`unlearned_model`); every entry
    has the shape of `unlearning.report_sections.revealed_kind`."""
    sizes = {"history": remaining + targets, "remaining": remaining}
    kinds = report.get("revealed") or {}
    if not isinstance(kinds, dict):  # a strategy that lists its revealed values as text
        kinds = {f"value_{n}": {"why": str(why)} for n, why in enumerate(kinds)}
    out: dict[str, Any] = {}
    for kind, entry in kinds.items():
        item = dict(entry) if isinstance(entry, dict) else {"why": str(entry)}
        rule = KIND_COHORTS.get(kind)
        item.setdefault("cohort", sizes.get(rule, rule) if isinstance(rule, str) else rule)
        item.setdefault("epsilon", None)
        out[kind] = item
    if "aggregate_gradients" in out:
        published = _aggregates(report.get("rounds", []))
        out["aggregate_gradients"]["published"] = published
        out["aggregate_gradients"]["cohort"] = min((p["cohort"] for p in published), default=None)
    out["stage1_models"] = revealed_kind(
        len(stage1),
        "M_i of every stored round: (M_{i−1} − M_i)/η is the FedAvg aggregate of its members S_i",
        cohort=min(stage1.values(), default=None),
        epsilon=None,
        published=[{"round": i, "cohort": n, "epsilon": None} for i, n in sorted(stage1.items())],
    )
    out["unlearned_model"] = revealed_kind(
        1, "M̂, the new global model, computed from the remaining clients' data", cohort=remaining, epsilon=None
    )
    return out


def build_report(
    job_dir: Path,
    job: JobRecord,
    model_hash: str,
    receipts: dict[str, list[dict[str, Any]]],
    finished: float,
    dealer: dict[str, Any],
    stage1: dict[int, int],
    remaining: int,
    stage1_dp: list[Release] | None = None,
) -> dict[str, Any]:
    """The report of a succeeded job; `stage1` is |S_i| of every stored round i ≤ T (the
    public models' cohorts), `remaining` the number of the history's clients that are not
    targets, `stage1_dp` the noised Stage I rounds this party logged. Its `job` times (UNIX
    seconds): `filed` = `queued` (a request is queued as it is filed; `created` is the same
    time), `dequeued` (party0's manager took it from the queue and paused training),
    `started` (no training round was open any more: the job fixed T) and `finished`."""
    report = json.loads((job_dir / "worker-report.json").read_text())
    report["revealed"] = revealed_section(report, stage1, remaining, len(job.targets))
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
        "rebased": job.rebased,
        "state": "succeeded",
        "created": job.created,
        "filed": job.created,
        "queued": job.created,
        "dequeued": job.dequeued,
        "started": job.started,
        "finished": finished,
        "seconds": finished - (job.started or finished),
    }
    report["dealer"] = dealer
    report["refused_answers"] = refused_answers.read(job_dir)
    report["erasure"] = receipts
    report["privacy"] = privacy_section(report.pop("dp", None), stage1_dp or [])
    _spend(report["revealed"], report["privacy"])
    return report


#: the revealed kinds that are noised aggregates when the job runs with DP
NOISED_KINDS = ("aggregate_gradients", "stage1_models", "unlearned_model")


def _spend(revealed: dict[str, Any], privacy: dict[str, Any]) -> None:
    """With DP, each noised kind (and each of its published values) carries the job's ε: the
    worst client's budget over the whole composition (Stage I + Stage II), an upper bound on
    what any one of these values costs that client. Other kinds stay null (not noised)."""
    if not privacy.get("dp"):
        return
    for kind in NOISED_KINDS:
        entry = revealed.get(kind)
        if entry is None:
            continue
        entry["epsilon"] = privacy["epsilon"]
        for value in entry.get("published", []):
            value["epsilon"] = privacy["epsilon"]


def privacy_section(dp: dict[str, Any] | None, stage1: list[Release]) -> dict[str, Any]:
    """(ε, δ) per client and for the job over the noised Stage I rounds and this job's
    Stage II releases (`privacy.accountant`); {"dp": False} when the job ran without DP."""
    if dp is None:
        return {"dp": False}
    stage2 = [Release(e["label"], float(e["noise_multiplier"]), tuple(e["members"])) for e in dp["releases"]]
    return {
        "dp": True,
        "settings": dp["settings"],
        **privacy_report([*stage1, *stage2], float(dp["settings"]["delta"])),
    }


def release_notice(report: dict[str, Any]) -> str | None:
    """What an operator must know when the release rule revealed no update (docs/PRIVACY.md,
    "Stage II release rule"): the unlearned model is then the initial model M_0 of the history,
    which forgets every target but has lost all training. None when an update was revealed or
    the strategy does not follow the release rule."""
    release = report.get("release")
    if not release or release.get("revealed_updates", 1) > 0:
        return None
    return (
        f"no update was revealed under the release rule (min_cohort {release['min_cohort']}; "
        f"excluded steps {release['excluded_steps']}, dropped steps {release['dropped_steps']}): "
        "the unlearned model is the history's initial model M_0"
    )


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
    for entry in report.get("refused_answers", []):
        lines.append(
            f"answer of {entry['client']} refused (round {entry['unlearning_round']} {entry['task']}, treated as "
            f"missing): {entry['reason']}"
        )
    notice = release_notice(report)
    if notice:
        lines.append(f"NOTICE: {notice}")
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
    evaluation = report.get("federated_evaluation")
    if evaluation:
        lines.append(f"federated evaluation ({evaluation['state']}): {evaluation['summary']}")
    for target, parts in sorted(report["erasure"].items()):
        for r in parts:
            lines.append(
                f"erased {target} on party{r['party']}: {len(r['rounds'])} rounds, {r['files_deleted']} files, "
                f"{r['bytes_deleted']} bytes, {r['rows_deleted']} rows"
            )
    return "\n".join(lines) + "\n"
