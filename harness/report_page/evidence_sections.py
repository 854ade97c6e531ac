"""The evidence sections of the job report page: the erasure certificate with its
verification status (as checked by whoever rendered the page, and compared with the job
the page reports), and the erasure receipts."""

from __future__ import annotations

from collections.abc import Mapping
from html import escape
from typing import Any

from client_sdk.evidence import CertificateCheck
from harness.report_page.glossary import term
from harness.report_page.markup import join, mb, note, section, table

STATUS_TEXT = {
    "unsigned": "No certificate: a party has no erasure-signing key configured.",
    "refused": "No certificate: a party refused to sign the statement.",
    "invalid": "No certificate: the signatures did not verify when party0 assembled it.",
}


def _items(lines: list[str]) -> str:
    return "<ul>" + "".join(f"<li>{escape(line)}</li>" for line in lines) + "</ul>"


def mismatches(report: Mapping[str, Any], check: CertificateCheck) -> list[str]:
    """What a verified certificate's statement says otherwise than the job report (empty: the
    certificate is this job's: same job id, forgotten clients, replaced and unlearned model)."""
    job, st = report.get("job", {}), check.statement
    named, models = st.get("job", {}), st.get("models", {})
    pairs = (
        ("job", named.get("id"), job.get("job_id")),
        ("forgotten clients", sorted(named.get("targets", [])), sorted(job.get("targets", []))),
        ("replaced model", models.get("replaced", {}).get("hash"), job.get("base_model_hash")),
        ("unlearned model", models.get("unlearned", {}).get("hash"), job.get("model_hash")),
    )
    return [
        f"the certificate names {what} {ours!s}, the report {theirs!s}"
        for what, ours, theirs in pairs
        if ours != theirs
    ]


def certificate(
    check: CertificateCheck | None, status: Mapping[str, Any] | None, file_name: str, report: Mapping[str, Any]
) -> str:
    """Verification badge, signers, what the certificate proves and does not prove."""
    title = join(term("certificate", "Erasure certificate"))
    if check is None:
        st = status or {}
        text = STATUS_TEXT.get(st.get("status", ""), "No erasure certificate was fetched for this job.")
        badge = '<p class="badge bad" data-verification="absent">NO CERTIFICATE</p>'
        return section("certificate", title, badge, note(text), note(str(st.get("detail", ""))))
    if not check.valid:
        badge = '<p class="badge bad" data-verification="refused">NOT VERIFIED</p>'
        return section("certificate", title, badge, _items(check.problems))
    other = mismatches(report, check)
    if other:
        badge = '<p class="badge bad" data-verification="other-job">SIGNED, BUT NOT FOR THIS JOB</p>'
        return section("certificate", title, badge, _items(other))
    badge = '<p class="badge good" data-verification="valid">VERIFIED: signed by party0 and party1</p>'
    signers = table(
        ["signer", "certificate subject", "issuer", "serial", "signed at"],
        [(s.signer, s.subject, s.issuer, s.serial, s.signed_at) for s in check.signers],
    )
    how = note(
        f"Check it yourself, offline: starfish verify {file_name} --ca <the deployment's CA certificate> "
        f"(statement sha256 {check.verification.statement_sha256})."
    )
    return section(
        "certificate",
        title,
        badge,
        signers,
        "<h3>It proves</h3>",
        _items(check.proves()),
        "<h3>It does not prove</h3>",
        _items(check.does_not_prove()),
        how,
    )


def erasure(report: Mapping[str, Any]) -> str:
    rows = []
    for target, receipts in sorted(report.get("erasure", {}).items()):
        for r in receipts:
            rows.append(
                (
                    target,
                    f"party{r['party']}",
                    len(r["rounds"]),
                    r["files_deleted"],
                    mb(r["bytes_deleted"]),
                    r["rows_deleted"],
                    len(r["content_sha256"]),
                )
            )
    if not rows:
        return section("erasure", "Erasure receipts", note("The report holds no erasure receipt."))
    return section(
        "erasure",
        join(term("receipt", "Erasure receipts")),
        note(
            join(
                "What each operator deleted: ",
                term("share", "share"),
                " files, database rows (zeroed on disk) and the hashes (SHA-256 fingerprints) of the deleted "
                "shares. A seed-compressed share has no file, so the two operators' file counts differ.",
            )
        ),
        table(["client", "party", "rounds", "files", "bytes", "rows", "share hashes"], rows, "num"),
    )
