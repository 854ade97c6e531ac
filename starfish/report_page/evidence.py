"""The evidence sections of the job report page: the erasure certificate with its
verification status (as checked by whoever rendered the page), and the erasure receipts."""

from __future__ import annotations

from collections.abc import Mapping
from html import escape
from typing import Any

from client_sdk.evidence import CertificateCheck
from starfish.report_page.sections import mb, note, section, table

STATUS_TEXT = {
    "unsigned": "No certificate: a party has no erasure-signing key configured.",
    "refused": "No certificate: a party refused to sign the statement.",
    "invalid": "No certificate: the signatures did not verify when party0 assembled it.",
}


def _items(lines: list[str]) -> str:
    return "<ul>" + "".join(f"<li>{escape(line)}</li>" for line in lines) + "</ul>"


def certificate(check: CertificateCheck | None, status: Mapping[str, Any] | None, file_name: str) -> str:
    """Verification badge, signers, what the certificate proves and does not prove."""
    if check is None:
        st = status or {}
        text = STATUS_TEXT.get(st.get("status", ""), "No erasure certificate was fetched for this job.")
        badge = '<p class="badge bad" data-verification="absent">NO CERTIFICATE</p>'
        return section("certificate", "Erasure certificate", badge, note(text), note(str(st.get("detail", ""))))
    if not check.valid:
        badge = '<p class="badge bad" data-verification="refused">NOT VERIFIED</p>'
        return section("certificate", "Erasure certificate", badge, _items(check.problems))
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
        "Erasure certificate",
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
        "Erasure receipts",
        note(
            "What each party deleted: share files, database rows (zeroed on disk) and the hashes of the deleted "
            "shares. A seed-compressed share has no file, so the two parties' file counts differ."
        ),
        table(["client", "party", "rounds", "files", "bytes", "rows", "share hashes"], rows, "num"),
    )
