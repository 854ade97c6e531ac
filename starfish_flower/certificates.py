"""The erasure certificate of an unlearning job, fetched and verified by the Flower server.

When a job succeeds, party0 and party1 each sign the same statement (targets, replaced and
unlearned model, each party's deletion receipt; `proto.certificate`). `verified` fetches
it from party0, verifies both signatures offline against the deployment's CA
(`client_sdk.evidence`), checks that the model the Flower server now holds is the
unlearned model the certificate names, and logs what it proves.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from flwr.app import ArrayRecord

from client_sdk.admin import AdminClient
from client_sdk.errors import StarfishError
from client_sdk.evidence import CertificateCheck, model_matches, verify_certificate
from starfish_flower import logs
from starfish_flower.arrays import flatten

log = logs.get(__name__)


def verified(admin: AdminClient, job_id: str, ca_cert: str | Path | bytes, model: ArrayRecord) -> CertificateCheck:
    """The job's certificate, verified (raises `StarfishError` when it is missing or refused)."""
    reply = admin.job_certificate(job_id)
    if not reply.certificate_json:
        raise StarfishError(f"job {job_id} has no erasure certificate ({reply.status}): {reply.detail}")
    check = verify_certificate(reply.certificate_json, ca_certs=[ca_cert])
    if not model_matches(check.statement, np.asarray(flatten(model))):
        raise StarfishError(f"the erasure certificate of job {job_id} names another model than the one Flower holds")
    log.info(
        "Starfish: erasure certificate of job %s verified (statement sha256 %s)",
        job_id,
        check.verification.statement_sha256[:16],
    )
    for line in check.proves():
        log.info("Starfish:   %s", line)
    return check
