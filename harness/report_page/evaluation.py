"""The page's "Evaluation by the remaining clients" section: the report's
`federated_evaluation` (docs/JOBS.md §7) in plain words, then its figures in a table."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.report_page.glossary import term
from harness.report_page.markup import definitions, join, note, section, table

STATES = {
    "pending": "not run yet",
    "running": "running: the remaining clients are answering",
    "revealed": "done: the sums were revealed",
    "not_enough_evaluators": "done: too few clients answered well, so nothing was revealed",
    "failed": "failed (the job itself is not affected)",
    "not_done": "not done (party0 restarted while it ran)",
    "off": "not configured",
}


def _percent(value: Any) -> str:
    return "n/a" if value is None else f"{100 * float(value):.1f} %"


def _figures(ev: Mapping[str, Any]) -> str:
    rows = [("accuracy on the clients' own data", _percent(ev.get("accuracy_new")), _percent(ev.get("accuracy_old")))]
    if ev.get("probe"):
        rows.append(
            (f"probe answered ({ev['probe']})", _percent(ev.get("probe_rate_new")), _percent(ev.get("probe_rate_old")))
        )
    sums = ev.get("sums") or {}
    rows.append(("examples evaluated (sum over the clients)", str(sums.get("total", "")), str(sums.get("total", ""))))
    return table(["", "new model (M̂)", "replaced model (M_T)"], rows, "num")


def federated_evaluation(report: Mapping[str, Any]) -> str:
    """The section; a note when the report has none (reports written before it existed)."""
    ev = report.get("federated_evaluation")
    title = join("Evaluation by the remaining clients (", term("federated-evaluation", "federated evaluation"), ")")
    if not ev:
        return section("evaluation", title, note("This report carries no federated evaluation."))
    people = ev.get("evaluators") or {}
    refused = "; ".join(f"{r['client']}: {r['reason']}" for r in people.get("refused", [])) or "none"
    rows = [
        ("status", STATES.get(str(ev.get("state")), str(ev.get("state")))),
        ("asked", ", ".join(people.get("asked", [])) or "none"),
        ("answers accepted", ", ".join(people.get("accepted", [])) or "none"),
        ("answers refused (left out)", refused),
        ("no answer by the deadline", ", ".join(people.get("missing", [])) or "none"),
        (term("cohort", "cohort rule"), (ev.get("cohort") or {}).get("verdict", "not reached")),
    ]
    parts = [f'<p class="evaluation-sentence">{join(ev.get("summary", ""))}</p>']
    if ev.get("state") == "revealed":
        parts.append(_figures(ev))
    parts.append(definitions(rows))
    return section("evaluation", title, *parts)
