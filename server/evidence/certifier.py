"""Signing a finished job's erasure certificate (party0 assembles, both parties sign).

`Attestor` (both parties): check a statement against this party's own view
(`statement.party_view` + `attestation.check_statement`) and sign it with the
`[signing]` key — party1 does this when party0 calls peer SignCertificate.

`Certifier` (party0), after the targets were erased on both parties:

1. build its view and add party1's receipts → the statement;
2. check and sign it itself; ask party1 to check and sign it (SignCertificate);
3. verify the assembled certificate as a verifier would (both signatures, the
   signing certificates against the deployment CA);
4. write `certificate.json` in the job directory (temp file, fsync, rename) and
   return the status that goes into the job report.

A refusal does not undo the job (its model is installed and its targets erased): the
job's report says the certificate was refused and why, the log says so at ERROR, and
`starfish_certificates_total{outcome="refused"}` counts it. Re-running is safe: an
existing certificate.json is returned as it is.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import grpc
from cryptography import x509

from mpc import durable
from proto.certificate import FORMAT, canonical_json
from proto.certificate_verify import verify_document
from proto.starfish.v1 import peer_pb2
from server import metrics
from server.evidence.attestation import AttestationRefused, check_statement
from server.evidence.signing import SigningIdentity
from server.evidence.statement import ViewError, party_view, with_peer_receipts
from server.jobs.jobstore import JobRecord, JobStore
from server.peer_client import PeerClient, PeerRefused
from server.store import Store

log = logging.getLogger(__name__)
CERTIFICATE_FILE = "certificate.json"


class NoSigningKey(RuntimeError):
    """This party has no `[signing]` identity configured."""


class Attestor:
    """Checks statements against this party's records and signs them."""

    def __init__(self, role: int, store: Store, jobs: JobStore, identity: SigningIdentity | None):
        self.role = role
        self.store = store
        self.jobs = jobs
        self.identity = identity

    def view(self, job: JobRecord) -> dict[str, Any]:
        return party_view(self.role, job, self.store, self.jobs.job_dir(job.job_id))

    def sign(self, job_id: str, statement: dict[str, Any]) -> dict[str, str]:
        """This party's signature entry; raises NoSigningKey, ViewError or AttestationRefused."""
        if self.identity is None:
            raise NoSigningKey(f"party{self.role} has no erasure-signing key configured ([signing] cert and key)")
        job = self.jobs.get(job_id)
        if job is None:
            raise ViewError(f"party{self.role} knows no job {job_id}")
        if (statement.get("job") or {}).get("id") != job_id:
            raise AttestationRefused(f"the statement is about another job than {job_id}")
        check_statement(statement, self.view(job), self.role)
        return self.identity.sign_statement(statement, time.time())


def _entry(reply: peer_pb2.CertificateSignature) -> dict[str, str]:
    return {
        "signer": reply.signer,
        "signed_at": reply.signed_at,
        "algorithm": reply.algorithm,
        "signature": reply.signature,
        "certificate": reply.certificate,
    }


class Certifier:
    """party0's side: assemble, sign, have party1 sign, verify and store a job's certificate."""

    def __init__(self, attestor: Attestor, peer: PeerClient, ca_path: Path):
        self.attestor = attestor
        self.peer = peer
        self.trusted = [x509.load_pem_x509_certificate(Path(ca_path).read_bytes())]

    def certify(self, job: JobRecord, receipts: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
        """Sign the job's certificate; returns its status for the report (never raises on refusal)."""
        path = self.attestor.jobs.job_dir(job.job_id) / CERTIFICATE_FILE
        if path.exists():
            return self._done(json.loads(path.read_text()), path)
        if self.attestor.identity is None:
            return self._status("unsigned", "party0 has no erasure-signing key configured ([signing] cert and key)")
        try:
            statement = with_peer_receipts(self.attestor.view(job), receipts, peer=1)
            mine = self.attestor.sign(job.job_id, statement)
            request = peer_pb2.CertificateRequest(job_id=job.job_id, statement_json=canonical_json(statement).decode())
            theirs = _entry(self.peer.unary("SignCertificate", request))
        except (ViewError, AttestationRefused) as exc:
            return self._status("refused", f"party0 will not sign: {exc}")
        except PeerRefused as exc:  # UNIMPLEMENTED: party1 has no signing key
            return self._status("unsigned" if exc.code == grpc.StatusCode.UNIMPLEMENTED else "refused", str(exc))
        doc = {"format": FORMAT, "statement": statement, "signatures": [mine, theirs]}
        check = verify_document(doc, self.trusted)
        if not check.valid:
            return self._status("invalid", "; ".join(check.problems))
        durable.atomic_write(path, (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode("utf-8"))
        log.info("job %s: erasure certificate signed by party0 and party1", job.job_id)
        return self._done(doc, path)

    def _done(self, doc: dict[str, Any], path: Path) -> dict[str, Any]:
        check = verify_document(doc, self.trusted)
        status = self._status("signed" if check.valid else "invalid", "; ".join(check.problems))
        status.update(
            file=path.name,
            statement_sha256=check.statement_sha256,
            signers=[{"signer": s.signer, "subject": s.subject, "signed_at": s.signed_at} for s in check.signers],
        )
        return status

    @staticmethod
    def _status(outcome: str, detail: str) -> dict[str, Any]:
        metrics.certificate_outcome(outcome)
        if outcome != "signed":
            log.error("erasure certificate %s: %s", outcome, detail)
        return {"status": outcome, "detail": detail}
