"""Checking an erasure certificate offline, and saying what it proves and what it does not.

    from client_sdk.evidence import verify_certificate
    check = verify_certificate("certificate.json", ca_certs=["ca.pem"])   # raises CertificateInvalid
    print("\\n".join(check.explain()))

A certificate (`proto.certificate`) is valid when party0 and party1 both signed the same
statement with erasure-signing certificates issued by a trusted CA
(`proto.certificate_verify`). Verification needs only the certificate file and the CA
certificate(s) — no connection to any party. `model_matches` checks that a model file
is the unlearned model the certificate names.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from cryptography import x509

from client_sdk.errors import StarfishError
from proto.certificate_verify import SignerInfo, Verification, verify_document
from proto.wire import model_hash

MAX_CERTIFICATE_BYTES = 16 * 1024 * 1024

DOES_NOT_PROVE = (
    (
        "that no other copy exists: each party attests deletion from its own store; a backup, a copy made "
        "outside the service, or data the client shared elsewhere is beyond what a signature can show"
    ),
    (
        "one party's deletion by the other: each receipt is its own party's word (the other party checked "
        "only that it covers every round in which the client was a member)"
    ),
    (
        "that the unlearned model forgot the client's influence: the certificate names the model; how well "
        "it forgets is measured by the job report's quality metrics and the project's quality results"
    ),
    "the signing times: they are each signer's own clock, not a trusted timestamp",
    (
        "that the operators did not collude: the trust model assumes at most one of party0, party1 and the "
        "dealer is corrupted"
    ),
    "that a signing key was not revoked after signing: no revocation list is consulted",
)


class CertificateInvalid(StarfishError):
    """The certificate failed verification; the message lists every problem found."""

    def __init__(self, problems: list[str]):
        super().__init__("erasure certificate refused: " + "; ".join(problems))
        self.problems = problems


@dataclass
class CertificateCheck:
    """A verified (or refused) certificate, with what it does and does not prove."""

    verification: Verification
    document: dict[str, Any] | None

    @property
    def valid(self) -> bool:
        return self.verification.valid

    @property
    def problems(self) -> list[str]:
        return self.verification.problems

    @property
    def signers(self) -> list[SignerInfo]:
        return self.verification.signers

    @property
    def statement(self) -> dict[str, Any]:
        return self.verification.statement or {}

    def proves(self) -> list[str]:
        """What a valid certificate establishes, in plain words (empty when it is not valid)."""
        if not self.valid:
            return []
        st = self.statement
        job, models = st["job"], st["models"]
        who = ", ".join(f"{s.signer} ({s.subject}, serial {s.serial}, signed {s.signed_at})" for s in self.signers)
        lines = [
            (
                f"both operators signed this statement: {who}; a signature cannot be made without that "
                "operator's signing key, and any change to the statement breaks both signatures"
            ),
            (
                f"job {job['id']} ({job['strategy']}) unlearned {', '.join(job['targets'])}: global model "
                f"{models['replaced']['global_round']} ({models['replaced']['hash'][:16]}…) was replaced by the "
                f"unlearned model {models['unlearned']['global_round']} ({models['unlearned']['hash']})"
            ),
        ]
        for target, entry in sorted(st["erasure"].items()):
            for name, r in sorted(entry["receipts"].items()):
                lines.append(
                    f"{name} attests it deleted the stored shares of {target}: {len(r['rounds'])} rounds, "
                    f"{r['files_deleted']} files, {r['bytes_deleted']:,} bytes, {r['rows_deleted']} rows, "
                    f"at {r['erased_at']}"
                )
        lines.append(
            "each party checked the statement against its own store and job record before signing "
            "(models, selected rounds, revealed values, its own receipt)"
        )
        kinds = ", ".join(f"{k} ({v.get('count', '?')})" for k, v in sorted(st.get("revealed", {}).items()))
        lines.append(f"what the computation revealed, by kind: {kinds}")
        return lines

    def does_not_prove(self) -> list[str]:
        return list(DOES_NOT_PROVE)

    def explain(self) -> list[str]:
        """A human-readable account: valid or refused, then what it proves and does not."""
        if not self.valid:
            return ["REFUSED: this erasure certificate does not verify", *(f"  - {p}" for p in self.problems)]
        return [
            (
                f"VALID: erasure certificate of job {self.statement['job']['id']} "
                f"(statement sha256 {self.verification.statement_sha256})"
            ),
            "It proves:",
            *(f"  - {line}" for line in self.proves()),
            "It does not prove:",
            *(f"  - {line}" for line in self.does_not_prove()),
        ]


def load_certificate(source: str | Path | bytes | dict[str, Any]) -> dict[str, Any]:
    """A certificate from a file path, JSON text/bytes or an already parsed object."""
    if isinstance(source, dict):
        return source
    if isinstance(source, Path) or (isinstance(source, str) and not source.lstrip().startswith("{")):
        path = Path(source)
        if path.stat().st_size > MAX_CERTIFICATE_BYTES:
            raise StarfishError(f"{path} is larger than {MAX_CERTIFICATE_BYTES} bytes: not a certificate")
        source = path.read_bytes()
    try:
        doc = json.loads(source)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise StarfishError(f"the certificate is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise StarfishError("the certificate is not a JSON object")
    return doc


def _pem_certificates(items: Sequence[str | Path | bytes]) -> list[x509.Certificate]:
    out = []
    for item in items:
        data = item if isinstance(item, bytes) else Path(item).read_bytes()
        try:
            out.extend(x509.load_pem_x509_certificates(data))
        except ValueError as exc:
            raise StarfishError(
                f"{item if not isinstance(item, bytes) else 'a CA'} is not a PEM certificate: {exc}"
            ) from None
    return out


def check_certificate(
    source: str | Path | bytes | dict[str, Any],
    ca_certs: Sequence[str | Path | bytes],
    party_certs: Sequence[str | Path | bytes] = (),
    now: dt.datetime | None = None,
) -> CertificateCheck:
    """Verify without raising: the result says valid or lists the problems."""
    doc = load_certificate(source)
    trusted = _pem_certificates(ca_certs)
    if not trusted:
        raise StarfishError("no trusted CA certificate given")
    return CertificateCheck(verify_document(doc, trusted, _pem_certificates(party_certs), now), doc)


def verify_certificate(
    source: str | Path | bytes | dict[str, Any],
    ca_certs: Sequence[str | Path | bytes],
    party_certs: Sequence[str | Path | bytes] = (),
    now: dt.datetime | None = None,
) -> CertificateCheck:
    """Verify a certificate offline against the CA certificate(s) (and, optionally, the exact
    party signing certificates); raises CertificateInvalid listing every problem."""
    check = check_certificate(source, ca_certs, party_certs, now)
    if not check.valid:
        raise CertificateInvalid(check.problems)
    return check


def model_matches(statement: dict[str, Any], params: np.ndarray) -> bool:
    """True when `params` (flat float32) is the unlearned model the statement names."""
    models = statement["models"]
    return model_hash(models["architecture"], np.asarray(params, dtype=np.float32)) == models["unlearned"]["hash"]
