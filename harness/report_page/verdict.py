"""The verdict at the top of the job report page: in plain words, was the client forgotten?

The verdict is "forgotten" (green) only when all of these hold: the job succeeded, every
forgotten client has an erasure receipt from both party0 and party1, and the erasure
certificate verifies (checked by whoever rendered the page) and names this very job, its
clients and models (`evidence.mismatches`). A job that did not succeed is "not forgotten";
a succeeded job without that proof is "not proven". Below the headline: who was forgotten;
when the job was filed (and queued), left the queue, started and finished (the report's
`job` times, docs/JOBS.md §8); which model replaced which; what each operator erased; who
signed; the certificate check; and the forgetting quality when it was measured.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from client_sdk.evidence import CertificateCheck
from harness.report_page.evidence_sections import mismatches
from harness.report_page.glossary import term
from harness.report_page.markup import Html, definitions, duration, join, mb, section, when

#: quality metrics the verdict quotes: (key, glossary key, label)
METRICS = (
    ("ter", "ter", "test error (TER)"),
    ("ba_asr", "ba-asr", "backdoor success (BA-ASR)"),
    ("mia_asr", "mia-asr", "membership inference (MIA-ASR)"),
)
PARTIES = (0, 1)


@dataclass(frozen=True)
class Verdict:
    """The page's answer: `kind` is "forgotten", "not-forgotten" or "not-proven"."""

    kind: str
    badge: str
    headline: str


def _short(digest: Any) -> str:
    return str(digest or "?")[:12]


def _who(job: Mapping[str, Any]) -> str:
    targets = list(job.get("targets", []))
    return ", ".join(targets) if targets else "no client named"


def _missing_receipts(report: Mapping[str, Any]) -> list[str]:
    """ "client on partyN" for every forgotten client and operator without an erasure receipt."""
    erasure = report.get("erasure") or {}
    return [
        f"{target} on party{p}"
        for target in report.get("job", {}).get("targets", [])
        for p in PARTIES
        if not any(int(r.get("party", -1)) == p for r in erasure.get(target, []))
    ]


def _certificate_problem(report: Mapping[str, Any], check: CertificateCheck | None) -> str:
    """Why the certificate does not prove the job ("" when it does)."""
    if check is None:
        status = (report.get("certificate") or {}).get("status", "absent")
        return f"no erasure certificate was checked for this page (certificate status: {status})"
    if not check.valid:
        return "the erasure certificate does NOT verify: " + "; ".join(check.problems)
    other = mismatches(report, check)
    return "the erasure certificate is not this job's: " + "; ".join(other) if other else ""


def decide(report: Mapping[str, Any], check: CertificateCheck | None) -> Verdict:
    """The verdict's kind, badge and headline sentence."""
    job = report.get("job", {})
    who = _who(job)
    was, its = ("were", "their") if len(job.get("targets", [])) > 1 else ("was", "its")
    state = job.get("state") or ("succeeded" if job.get("model_hash") else "unknown")
    if state == "cancelled":
        return Verdict(
            "not-forgotten",
            "NOT FORGOTTEN",
            f"{who} {was} NOT forgotten: the job was cancelled by the admin before it finished; nothing was "
            "erased and the model in service was not replaced.",
        )
    if state != "succeeded":
        return Verdict("not-forgotten", "NOT FORGOTTEN", f"{who} {was} NOT forgotten: the job ended as {state}.")
    missing = _missing_receipts(report)
    problem = _certificate_problem(report, check)
    if missing or problem:
        why = "; ".join([*(f"no erasure receipt of {m}" for m in missing), *([problem] if problem else [])])
        return Verdict(
            "not-proven",
            "NOT PROVEN",
            f"The job for {who} finished, but this page does not prove that {who} {was} forgotten: {why}.",
        )
    return Verdict(
        "forgotten",
        "FORGOTTEN",
        f"{who} {was} forgotten: both operators erased {its} stored data and signed the erasure certificate, "
        f"which verifies, and a new model computed without {its} data replaced the model in service.",
    )


def _timeline(job: Mapping[str, Any]) -> list[tuple[Any, Any]]:
    """Filed (and queued), left the queue, started and finished, each with the wait before it."""
    filed = job.get("filed", job.get("created"))
    dequeued, started, finished = job.get("dequeued"), job.get("started"), job.get("finished")
    rows: list[tuple[Any, Any]] = [("requested (filed)", f"{when(filed)}; queued at once, in the order of filing")]
    if dequeued and filed:
        rows.append(("left the queue", f"{when(dequeued)}, {duration(dequeued - filed)} after filing"))
    if started and filed:
        after = dequeued or filed
        wait = "waiting for the open training round to end" if dequeued else "in the queue and for the open round"
        rows.append(("started", f"{when(started)}, {duration(started - after)} later ({wait})"))
    else:
        rows.append(("started", "never"))
    if job.get("cancelled_at"):
        rows.append(("cancelled", when(job["cancelled_at"])))
    elif finished and started:
        total = f"; {duration(finished - filed)} from request to finish" if filed else ""
        rows.append(("finished", f"{when(finished)}: the unlearning took {duration(finished - started)}{total}"))
    return rows


def _models(job: Mapping[str, Any]) -> Html:
    if not job.get("model_hash"):
        return join("not replaced: global model ", str(job.get("base_round", "?")), " stays in service")
    return join(
        term("global-model", f"global model {job.get('base_round', '?')}"),
        f" ({_short(job.get('base_model_hash'))}…) was replaced by the unlearned ",
        f"global model {job.get('new_global_round', '?')} ({_short(job.get('model_hash'))}…)",
    )


def _erased(report: Mapping[str, Any]) -> Html:
    """One sentence per operator and client: what it deleted, and when."""
    lines = [
        f"party{r.get('party', '?')} deleted the shares of {target} from {len(r.get('rounds', []))} round(s): "
        f"{r.get('files_deleted', '?')} file(s), {mb(float(r.get('bytes_deleted', 0)))}, "
        f"{r.get('rows_deleted', '?')} database row(s), at {when(r.get('erased_at'))}"
        for target, receipts in sorted((report.get("erasure") or {}).items())
        for r in receipts
    ]
    if not lines:
        return Html("nothing: no erasure receipt")
    return join(term("receipt", "Both operators' receipts"), ": ", "; ".join(lines), ".")


def _signed(report: Mapping[str, Any], check: CertificateCheck | None) -> Html:
    cert = report.get("certificate") or {}
    signers = [(s.signer, s.signed_at) for s in check.signers] if check is not None and check.valid else []
    signers = signers or [(s.get("signer", "?"), s.get("signed_at", "?")) for s in cert.get("signers", [])]
    if not signers:
        return join("not signed (certificate status: ", str(cert.get("status", "absent")), ")")
    who = ", ".join(f"{name} at {at}" for name, at in signers)
    return join(term("certificate", "the erasure certificate"), f" was signed by {who}")


def _checked(report: Mapping[str, Any], check: CertificateCheck | None) -> str:
    problem = _certificate_problem(report, check)
    if check is None or problem:
        return problem[:1].upper() + problem[1:]
    return (
        "It verifies against the CA certificate of whoever produced this page, and it names this job, its "
        f"client(s) and both models (statement sha256 {check.verification.statement_sha256[:16]}…)"
    )


def _quality(metrics: Mapping[str, Mapping[str, float]] | None) -> Html:
    """The forgetting-quality figures: after unlearning, retrained without the client, before."""
    if not metrics or "starfish" not in metrics:
        return join("not measured for this job (the service holds no test data; see ", term("ter"), ")")
    parts = []
    for key, glossary_key, label in METRICS:
        figures = [f"{100 * float(metrics['starfish'].get(key, 0.0)):.1f} % after unlearning"]
        for model, which in (("retrain", "retrained without the client"), ("before", "before")):
            if model in metrics:
                figures.append(f"{100 * float(metrics[model].get(key, 0.0)):.1f} % {which}")
        parts.append(join(term(glossary_key, label), " ", ", ".join(figures)))
    return Html("; ".join(parts))


def verdict(
    report: Mapping[str, Any], check: CertificateCheck | None, metrics: Mapping[str, Mapping[str, float]] | None
) -> str:
    """The verdict section: badge, headline, then the facts behind it."""
    job = report.get("job", {})
    found = decide(report, check)
    cls = "good" if found.kind == "forgotten" else "bad"
    rows = [
        ("who", f"{_who(job)} (asked to be forgotten; job {job.get('job_id', '?')})"),
        *_timeline(job),
        ("model", _models(job)),
        ("data erased", _erased(report)),
        ("signed", _signed(report, check)),
        ("certificate check", _checked(report, check)),
        ("forgetting quality", _quality(metrics)),
    ]
    return section(
        "verdict",
        "Verdict",
        f'<p class="badge {cls}" data-verdict="{found.kind}">{found.badge}</p>',
        f'<p class="verdict" id="verdict-text">{join(found.headline)}</p>',
        definitions(rows),
    )
