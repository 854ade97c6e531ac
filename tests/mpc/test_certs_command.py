"""`starfish certs`: TLS identities for the three operators, signing pairs for the two parties,
and the two kinds of rotation."""

from __future__ import annotations

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from mpc.plane.certs import issue_signing_cert
from proto import certificate
from starfish.cli import main


def _cert(path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def _cn(cert: x509.Certificate) -> str:
    return cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value


def test_certs_issues_three_tls_identities_and_two_signing_pairs(tmp_path):
    assert main(["certs", "--out", str(tmp_path), "--ip", "10.0.0.3"]) == 0
    ca = _cert(tmp_path / "ca.pem")
    for name in ("party0", "party1", "dealer"):
        cert = _cert(tmp_path / f"{name}.pem")
        assert _cn(cert) == name and cert.issuer == ca.subject
        usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        assert ExtendedKeyUsageOID.SERVER_AUTH in usage and ExtendedKeyUsageOID.CLIENT_AUTH in usage
        ips = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
            x509.IPAddress
        )
        assert {str(ip) for ip in ips} == {"127.0.0.1", "10.0.0.3"}
        assert (tmp_path / f"{name}.key").stat().st_mode & 0o077 == 0
    for name in ("party0", "party1"):
        signing = _cert(tmp_path / f"{name}-signing.pem")
        assert _cn(signing) == name
        usage = signing.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        assert ExtendedKeyUsageOID.SERVER_AUTH not in usage  # a signing certificate cannot serve TLS
        assert [u.dotted_string for u in usage] == [certificate.DOCUMENT_SIGNING_OID]  # what the verifier requires
    assert not (tmp_path / "dealer-signing.pem").exists()  # the dealer signs nothing
    with pytest.raises(ValueError, match="sign erasure certificates"):
        issue_signing_cert(tmp_path, "dealer")


def test_rotations_keep_the_ca_and_replace_one_pair(tmp_path):
    assert main(["certs", "--out", str(tmp_path)]) == 0
    ca, dealer, party1 = (tmp_path / n for n in ("ca.pem", "dealer.pem", "party1.pem"))
    before = {p: p.read_bytes() for p in (ca, dealer, party1)}
    old_signing = _cert(tmp_path / "party1-signing.pem")

    assert main(["certs", "--out", str(tmp_path), "--issue", "dealer"]) == 0
    assert ca.read_bytes() == before[ca] and party1.read_bytes() == before[party1]
    assert dealer.read_bytes() != before[dealer] and _cert(dealer).issuer == _cert(ca).subject

    assert main(["certs", "--out", str(tmp_path), "--rotate-signing", "party1"]) == 0
    new_signing = _cert(tmp_path / "party1-signing.pem")
    assert new_signing.serial_number != old_signing.serial_number
    assert (tmp_path / f"party1-signing-{old_signing.serial_number:x}.pem").exists()  # kept for the records
    assert party1.read_bytes() == before[party1]  # TLS untouched
