"""party0's certifier without the network: a certificate already written (a restart after
signing) is reused and re-verified rather than signed again; a party without a signing key
reports `unsigned` and asks nobody; a stored certificate that no longer verifies is `invalid`."""

from __future__ import annotations

import json

import pytest

from server.evidence.certifier import CERTIFICATE_FILE, Attestor, Certifier
from server.jobs.jobstore import JobStore
from server.store import Store

from helpers.evidence_fixtures import Keys, certificate


@pytest.fixture
def parts(tmp_path):
    keys = Keys.make(tmp_path / "pki")
    store, jobs = Store(tmp_path / "data", 0), JobStore(tmp_path / "data")
    job = jobs.add("j0123456789ab", ["c2"], "starfish", "{}", state="running")
    # peer=None: any attempt to reach party1 would fail the test
    return keys, jobs, job, Certifier(Attestor(0, store, jobs, None), None, keys.ca)  # type: ignore[arg-type]


def test_an_existing_certificate_is_reused_after_a_restart(parts):
    keys, jobs, job, certifier = parts
    doc = certificate(keys)
    (jobs.job_dir(job.job_id) / CERTIFICATE_FILE).write_text(json.dumps(doc))
    status = certifier.certify(job, {})
    assert status["status"] == "signed" and [s["signer"] for s in status["signers"]] == ["party0", "party1"]
    assert len(status["statement_sha256"]) == 64


def test_a_stored_certificate_that_does_not_verify_is_reported_invalid(parts):
    keys, jobs, job, certifier = parts
    doc = certificate(keys)
    doc["statement"]["job"]["targets"] = ["c3"]
    (jobs.job_dir(job.job_id) / CERTIFICATE_FILE).write_text(json.dumps(doc))
    status = certifier.certify(job, {})
    assert status["status"] == "invalid" and "does not match the statement" in status["detail"]


def test_without_a_signing_key_the_certificate_is_unsigned(parts):
    _, _, job, certifier = parts
    status = certifier.certify(job, {})
    assert status == {
        "status": "unsigned",
        "detail": "party0 has no erasure-signing key configured ([signing] cert and key)",
    }
