"""The job report's `federated_evaluation` section, its sentence in plain words and its
JobStatus form (docs/JOBS.md §8; docs/COMPLIANCE.md, "Federated evaluation").

Every value the evaluation publishes is listed here: the revealed sums (Σ correct(M̂),
Σ correct(M_T), Σ total and, with a probe, Σ probe_hits(M̂), Σ probe_hits(M_T), Σ probe_total),
the accuracies and probe rates computed from them, who was asked, accepted, refused (and why)
or missing, and the cohort verdict. Per-client counts are never opened, so never listed.
The report file is rewritten durably (temp file, fsync, rename) whenever the section changes;
once the sums are revealed, the report's `revealed` section lists them too (`evaluation_sums`,
its cohort the accepted evaluators' principals).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mpc import durable
from proto.starfish.v1 import admin_pb2, common_pb2
from server.jobs.evaluation_tasks import NOT_DONE, OFF, PENDING, REVEALED, RUNNING
from unlearning.report_sections import revealed_kind

REPORT, SUMMARY = "report.json", "summary.txt"


def initial(enabled: bool, why_off: str = "") -> dict[str, Any]:
    """The section written with the job's report: `pending`, or `off` and why."""
    if enabled:
        return {"state": PENDING, "summary": "The remaining clients' evaluation has not run yet."}
    return {"state": OFF, "summary": f"No federated evaluation: {why_off}."}


def _rate(hits: int, total: int) -> float | None:
    return hits / total if total else None


def revealed(base: dict[str, Any], sums: dict[str, int], probe: str) -> dict[str, Any]:
    """The section once the sums are revealed: accuracies and probe rates from the sums."""
    out = dict(base, state=REVEALED, sums=sums)
    out["accuracy_new"] = _rate(sums["correct_new"], sums["total"])
    out["accuracy_old"] = _rate(sums["correct_old"], sums["total"])
    out["probe"] = probe or None
    out["probe_rate_new"] = _rate(sums["probe_new"], sums["probe_total"]) if probe else None
    out["probe_rate_old"] = _rate(sums["probe_old"], sums["probe_total"]) if probe else None
    out["summary"] = sentence(out)
    return out


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f} %"


def sentence(section: dict[str, Any]) -> str:
    """The plain-words sentence of a section (also the page's and JobStatus's)."""
    state = section.get("state")
    ev = section.get("evaluators") or {}
    if state != REVEALED:
        return str(section.get("summary") or state)
    n = len(ev.get("accepted", []))
    text = (
        f"On {n} remaining clients' own data ({section['sums']['total']} examples) the new model scores "
        f"{_percent(section['accuracy_new'])} against {_percent(section['accuracy_old'])} for the replaced one."
    )
    if section.get("probe"):
        text += (
            f" On the probe ({section['probe']}) it answers {_percent(section['probe_rate_new'])} as the probe "
            f"expects, against {_percent(section['probe_rate_old'])} for the replaced model."
        )
    if ev.get("refused") or ev.get("missing"):
        text += f" {len(ev.get('refused', []))} answer(s) were refused and {len(ev.get('missing', []))} missing."
    return text


def write(job_dir: Path, section: dict[str, Any], render_summary) -> None:
    """Put `section` into the job's report (and its summary), durably."""
    path = job_dir / REPORT
    report = json.loads(path.read_text())
    report["federated_evaluation"] = section
    if section.get("state") == REVEALED:
        report.setdefault("revealed", {})["evaluation_sums"] = revealed_kind(
            len(section["sums"]),
            "the sums of the remaining clients' evaluation counts of M̂ and M_T (federated_evaluation)",
            cohort=section["cohort"]["principals"],
            epsilon=None,
        )
    durable.atomic_write(path, json.dumps(report, indent=1, sort_keys=True).encode())
    durable.atomic_write(job_dir / SUMMARY, render_summary(report).encode())


def read(job_dir: Path) -> dict[str, Any] | None:
    """The section of a job's report (None before the report exists or without one)."""
    path = job_dir / REPORT
    if not path.exists():
        return None
    return json.loads(path.read_text()).get("federated_evaluation")


def interrupted(job_dir: Path, render_summary) -> bool:
    """After a restart of party0: a section left `pending` or `running` becomes `not_done`."""
    section = read(job_dir)
    if section is None or section.get("state") not in (PENDING, RUNNING):
        return False
    note = "The federated evaluation was not done: party0 restarted while it ran."
    write(job_dir, dict(section, state=NOT_DONE, summary=note), render_summary)
    return True


def to_proto(section: dict[str, Any]) -> admin_pb2.FederatedEvaluation:
    """JobStatus's `federated_evaluation`."""
    ev = section.get("evaluators") or {}
    cohort = section.get("cohort") or {}

    def num(key: str) -> float:
        return float(section.get(key) or 0.0)

    return admin_pb2.FederatedEvaluation(
        state=str(section.get("state", "")),
        summary=sentence(section),
        accuracy_new=num("accuracy_new"),
        accuracy_old=num("accuracy_old"),
        probe_rate_new=num("probe_rate_new"),
        probe_rate_old=num("probe_rate_old"),
        accepted=len(ev.get("accepted", [])),
        refused=len(ev.get("refused", [])),
        missing=len(ev.get("missing", [])),
        cohort=str(cohort.get("verdict", "")),
        refused_clients=[
            common_pb2.Exclusion(client_id=r["client"], reason=r["reason"]) for r in ev.get("refused", [])
        ],
    )
