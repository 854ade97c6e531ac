"""Offline verification of erasure certificates (`client_sdk.evidence`, `proto.certificate_verify`)
with real keys and certificates from `starfish certs`: a valid certificate is accepted and
explained; a tampered statement, a missing signature, a wrong key, a certificate from another
CA, a TLS certificate used for signing, a swapped signer and a future date are each refused
with a message that names the problem."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import numpy as np
import pytest

from client_sdk.evidence import CertificateInvalid, check_certificate, model_matches, verify_certificate
from harness.local import REPO_ROOT
from mpc.plane.certificate_authority import issue_signing_cert
from proto.wire import model_hash

from helpers.evidence_fixtures import Keys, certificate, sign_as, statement


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> Keys:
    return Keys.make(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def other(tmp_path_factory) -> Keys:
    """A second deployment's CA and keys (not trusted by the verifier)."""
    return Keys.make(tmp_path_factory.mktemp("other-pki"))


def _refused(doc: dict, keys: Keys, *fragments: str, **kw) -> list[str]:
    with pytest.raises(CertificateInvalid) as err:
        verify_certificate(doc, [keys.ca], **kw)
    text = str(err.value)
    for fragment in fragments:
        assert fragment in text, text
    return err.value.problems


def test_a_valid_certificate_is_accepted_and_explained(keys, tmp_path):
    doc = certificate(keys)
    path = tmp_path / "certificate.json"
    path.write_text(json.dumps(doc, indent=4))  # layout and key order do not matter: the canonical form is signed
    check = verify_certificate(path, [keys.ca])
    assert check.valid and [s.signer for s in check.signers] == ["party0", "party1"]
    assert check.signers[0].fingerprint_sha256 != check.signers[1].fingerprint_sha256
    text = "\n".join(check.explain())
    assert text.startswith("VALID") and "party0 attests it deleted the stored shares of c2" in text
    assert "party1 attests" in text and "replaced by the unlearned model 4 (" + "2" * 64 in text
    assert "no other copy exists" in text  # and says what it cannot prove


def test_a_tampered_statement_is_refused(keys):
    doc = certificate(keys)
    doc["statement"]["erasure"]["c2"]["receipts"]["party1"]["bytes_deleted"] = 999_999
    _refused(doc, keys, "party0's signature does not match the statement", "party1's signature does not match")
    doc = certificate(keys)
    doc["statement"]["models"]["unlearned"]["hash"] = "3" * 64  # claims another model replaced the old one
    _refused(doc, keys, "does not match the statement")


def test_a_certificate_signed_by_one_party_only_is_refused(keys):
    doc = certificate(keys)
    doc["signatures"] = [e for e in doc["signatures"] if e["signer"] == "party0"]
    problems = _refused(doc, keys, "not signed by party1: a certificate needs the signatures of both operators")
    assert len(problems) == 1  # party0's own signature is fine
    doc["signatures"] = doc["signatures"] * 2
    _refused(doc, keys, "party0 appears 2 times")


def test_a_signature_made_with_a_wrong_key_is_refused(keys):
    st = statement()
    doc = certificate(keys, st)
    # party1's certificate, but party0's key made the signature
    doc["signatures"][1] = sign_as("party1", st, keys.key("party0-signing"), keys.pem("party1-signing"))
    _refused(doc, keys, "party1's signature does not match the statement")


def test_a_certificate_from_another_ca_is_refused(keys, other):
    st = statement()
    doc = certificate(keys, st)
    doc["signatures"][1] = sign_as("party1", st, other.key("party1-signing"), other.pem("party1-signing"))
    _refused(doc, keys, "party1: its certificate (issuer", "is not issued by a trusted CA")
    # trusting only the other CA refuses party0 instead
    with pytest.raises(CertificateInvalid, match="party0: its certificate .* not issued by a trusted CA"):
        verify_certificate(doc, [other.ca])
    assert verify_certificate(doc, [keys.ca, other.ca]).valid  # both operators' CAs trusted


def test_a_tls_certificate_cannot_sign(keys):
    st = statement()
    doc = certificate(keys, st)
    doc["signatures"][0] = sign_as("party0", st, keys.key("party0"), keys.pem("party0"))
    _refused(doc, keys, "party0: its certificate is not an erasure-signing certificate")


def test_a_signature_moved_to_the_other_role_is_refused(keys):
    doc = certificate(keys)
    for entry in doc["signatures"]:
        entry["signer"] = {"party0": "party1", "party1": "party0"}[entry["signer"]]
    _refused(doc, keys, "party0: its certificate names ['party1']", "party0's signature does not match")


def test_a_signature_dated_in_the_future_is_refused(keys):
    import time

    st = statement()
    doc = certificate(keys, st)
    doc["signatures"][0] = sign_as(
        "party0", st, keys.key("party0-signing"), keys.pem("party0-signing"), when=time.time() + 3 * 86400
    )
    _refused(doc, keys, "party0's signature is dated in the future")


def test_pinned_party_certificates(keys, tmp_path):
    doc = certificate(keys)
    pins = [keys.root / "party0-signing.pem", keys.root / "party1-signing.pem"]
    assert verify_certificate(doc, [keys.ca], party_certs=pins).valid
    rotated = tmp_path / "rotated"
    rotated.mkdir()
    for name in ("ca.pem", "ca.key"):
        (rotated / name).write_bytes((keys.root / name).read_bytes())
    issue_signing_cert(rotated, "party1")  # same CA, a new party1 key: valid, but not the pinned one
    _refused(doc, keys, "not one of the given party certificates", party_certs=[rotated / "party1-signing.pem"])


def test_signing_key_rotation_keeps_old_certificates_verifiable(keys, tmp_path):
    pki = Keys.make(tmp_path / "pki")
    old = certificate(pki)
    _, _ = issue_signing_cert(pki.root, "party0")  # rotate party0's signing key
    assert list(pki.root.glob("party0-signing-*.pem")), "the previous certificate is kept"
    assert verify_certificate(old, [pki.ca]).valid
    new = certificate(pki)
    assert verify_certificate(new, [pki.ca]).valid
    assert new["signatures"][0]["certificate"] != old["signatures"][0]["certificate"]


def test_a_document_of_another_kind_is_refused(keys, tmp_path):
    check = check_certificate({"format": "something else"}, [keys.ca])
    assert not check.valid and "not a Starfish erasure certificate" in check.problems[0]
    assert check.explain()[0].startswith("REFUSED")


def test_model_matches_names_the_unlearned_model():
    params = np.linspace(-1, 1, 10, dtype=np.float32)
    st = statement()
    st["models"]["unlearned"]["hash"] = model_hash(st["models"]["architecture"], params)
    assert model_matches(st, params)
    assert not model_matches(st, params + 1e-3)


def test_starfish_verify_command(keys, tmp_path):
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    doc = certificate(keys)
    good.write_text(json.dumps(doc))
    doc["signatures"].pop()
    bad.write_text(json.dumps(doc))
    cmd = [sys.executable, "-m", "starfish_cli", "verify", "--ca", str(keys.ca)]
    ok = subprocess.run([*cmd, str(good)], check=False, cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    assert "VALID" in ok.stdout and "It does not prove" in ok.stdout
    refused = subprocess.run([*cmd, str(bad)], check=False, cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1 and "not signed by party1" in refused.stdout


def test_the_statement_is_not_changed_by_verification(keys):
    doc = certificate(keys)
    before = copy.deepcopy(doc)
    verify_certificate(doc, [keys.ca])
    assert doc == before
