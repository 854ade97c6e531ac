"""What makes an erasure certificate valid (`proto.certificate` describes the document).

A certificate is valid when, for each of party0 and party1, exactly one signature entry:

1. carries an X.509 certificate whose common name is the signer's role, that allows
   digital signature and content commitment and is issued for document signing only
   (a TLS certificate is refused);
2. chains directly to one of the trusted CA certificates, and both it and the CA were
   valid at the signature's `signed_at` (a certificate signed before a key rotation
   stays verifiable); `signed_at` is not in the future;
3. (when the verifier pins party certificates) is one of the pinned certificates;
4. holds a valid signature of `signing_payload(statement, signer, signed_at)`.

The two signatures must come from two different keys. Every failed check is reported,
with the signer it concerns, so a refusal says exactly why.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from proto.certificate import (
    DOCUMENT_SIGNING_OID,
    FORMAT,
    SIGNERS,
    CanonicalError,
    canonical_json,
    parse_utc_iso,
    signature_valid,
    signing_payload,
)

CLOCK_SKEW = dt.timedelta(minutes=5)  #: a signature dated this far in the future is still accepted
FIELDS = ("signer", "signed_at", "algorithm", "signature", "certificate")


@dataclass(frozen=True)
class SignerInfo:
    """Who signed, with which certificate, when."""

    signer: str
    subject: str
    issuer: str
    serial: str
    fingerprint_sha256: str  #: of the signing certificate (DER)
    signed_at: str
    algorithm: str


@dataclass
class Verification:
    """The outcome of checking a certificate: valid, or the list of problems found."""

    problems: list[str] = field(default_factory=list)
    signers: list[SignerInfo] = field(default_factory=list)
    statement: dict[str, Any] | None = None
    statement_sha256: str = ""

    @property
    def valid(self) -> bool:
        return not self.problems and len(self.signers) == len(SIGNERS)


def usage_problem(cert: x509.Certificate, name: str) -> str | None:
    """Why `cert` cannot sign erasure certificates for `name` (None when it can)."""
    names = [a.value for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    if names != [name]:
        return f"its certificate names {names or 'nobody'}, not {name!r}"
    try:
        usage = cert.extensions.get_extension_for_class(x509.KeyUsage).value
        eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return (
            "its certificate is not an erasure-signing certificate "
            "(no key usage for document signing; a TLS certificate?)"
        )
    oids = {u.dotted_string for u in eku}
    if not (usage.digital_signature and usage.content_commitment) or DOCUMENT_SIGNING_OID not in oids:
        return (
            "its certificate is not issued for signing documents "
            "(key usage content commitment, RFC 9336 document signing)"
        )
    if ExtendedKeyUsageOID.SERVER_AUTH.dotted_string in oids or ExtendedKeyUsageOID.CLIENT_AUTH.dotted_string in oids:
        return "its certificate is also a TLS certificate; erasure certificates need a signing-only certificate"
    return None


def _valid_at(cert: x509.Certificate, when: dt.datetime) -> bool:
    return cert.not_valid_before_utc <= when <= cert.not_valid_after_utc


def _issuer_problem(cert: x509.Certificate, trusted: Sequence[x509.Certificate], when: dt.datetime) -> str | None:
    for ca in trusted:
        if ca.subject != cert.issuer:
            continue
        try:
            cert.verify_directly_issued_by(ca)
        except (InvalidSignature, ValueError, TypeError):
            continue
        try:
            is_ca = ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        except x509.ExtensionNotFound:
            is_ca = False
        if not is_ca:
            return f"its issuer {ca.subject.rfc4514_string()} is not a CA certificate"
        if not _valid_at(ca, when):
            return f"its CA {ca.subject.rfc4514_string()} was not valid at the signing time"
        return None
    return f"its certificate (issuer {cert.issuer.rfc4514_string()}) is not issued by a trusted CA"


def _fingerprint(cert: x509.Certificate) -> str:
    return hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).hexdigest()


def _check_entry(entry: Any, statement: dict, trusted, pinned: set[str], now: dt.datetime) -> tuple[list[str], Any]:
    """Problems of one signature entry, and (SignerInfo, public key DER) when it is sound."""
    if not isinstance(entry, dict) or not all(isinstance(entry.get(k), str) for k in FIELDS):
        return [f"a signature entry lacks one of {FIELDS}"], None
    name = entry["signer"]
    try:
        when = parse_utc_iso(entry["signed_at"])
        cert = x509.load_pem_x509_certificate(entry["certificate"].encode("ascii"))
    except (ValueError, UnicodeEncodeError) as exc:
        return [f"{name}'s signature entry cannot be read: {exc}"], None
    problems = []
    if when > now + CLOCK_SKEW:
        problems.append(f"{name}'s signature is dated in the future ({entry['signed_at']})")
    for problem in (usage_problem(cert, name), _issuer_problem(cert, trusted, when)):
        if problem:
            problems.append(f"{name}: {problem}")
    if not _valid_at(cert, when):
        problems.append(f"{name}: its certificate was not valid at the signing time {entry['signed_at']}")
    if pinned and _fingerprint(cert) not in pinned:
        problems.append(f"{name}: its certificate is not one of the given party certificates")
    payload = signing_payload(statement, name, entry["signed_at"])
    if not signature_valid(cert.public_key(), entry["algorithm"], payload, entry["signature"]):
        problems.append(
            f"{name}'s signature does not match the statement (altered after signing, or signed with another key)"
        )
    info = SignerInfo(
        name,
        cert.subject.rfc4514_string(),
        cert.issuer.rfc4514_string(),
        f"{cert.serial_number:x}",
        _fingerprint(cert),
        entry["signed_at"],
        entry["algorithm"],
    )
    key = cert.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return problems, (info, key)


def verify_document(
    doc: Any,
    trusted: Sequence[x509.Certificate],
    pinned: Sequence[x509.Certificate] = (),
    now: dt.datetime | None = None,
) -> Verification:
    """Check a parsed certificate against trusted CA certificates (and pinned party certificates)."""
    out = Verification()
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        out.problems.append(f"not a Starfish erasure certificate (format must be {FORMAT!r})")
        return out
    statement, entries = doc.get("statement"), doc.get("signatures")
    if not isinstance(statement, dict) or not isinstance(entries, list):
        out.problems.append("the certificate needs a 'statement' object and a 'signatures' list")
        return out
    try:
        out.statement_sha256 = hashlib.sha256(canonical_json(statement)).hexdigest()
    except CanonicalError as exc:
        out.problems.append(f"the statement has no canonical form: {exc}")
        return out
    out.statement = statement
    now = now or dt.datetime.now(dt.UTC)
    pins = {_fingerprint(c) for c in pinned}
    keys = []
    for stray in sorted({str(e.get("signer")) for e in entries if isinstance(e, dict)} - set(SIGNERS)):
        out.problems.append(f"signature by an unknown signer {stray!r}")
    for name in SIGNERS:
        mine = [e for e in entries if isinstance(e, dict) and e.get("signer") == name]
        if not mine:
            out.problems.append(f"not signed by {name}: a certificate needs the signatures of both operators")
            continue
        if len(mine) > 1:
            out.problems.append(f"{name} appears {len(mine)} times among the signatures")
            continue
        problems, sound = _check_entry(mine[0], statement, trusted, pins, now)
        out.problems += problems
        if sound is not None and not problems:
            out.signers.append(sound[0])
            keys.append(sound[1])
    if len(keys) == 2 and keys[0] == keys[1]:
        out.problems.append("both signatures come from the same key: two operators must sign")
    return out
