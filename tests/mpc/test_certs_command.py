"""`starfish certs`: TLS identities for the three operators, signing pairs for the two parties,
and the two kinds of rotation."""

from __future__ import annotations

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from mpc.plane.certificate_authority import issue_signing_cert
from proto import certificate
from starfish_cli.entry import main


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


def _keys(directory) -> set[str]:
    return {p.name for p in directory.iterdir() if p.name.endswith(".key")}


def test_each_operator_keeps_its_keys_and_the_ca_signs_only_requests(tmp_path):
    ca_dir = tmp_path / "ca"
    assert main(["certs", "ca", "--dir", str(ca_dir)]) == 0
    hosts = {"party0": "10.0.0.1", "party1": "10.0.0.2", "dealer": "10.0.0.3"}
    for name, ip in hosts.items():
        host = tmp_path / name
        extra = ["--signing"] if name != "dealer" else []
        assert main(["certs", "request", "--name", name, "--dir", str(host), "--ip", ip, *extra]) == 0
        signed = []
        for csr in sorted(host.glob("*.csr")):  # only the requests travel to the CA
            out = tmp_path / "outbox" / csr.with_suffix(".pem").name
            out.parent.mkdir(exist_ok=True)
            assert main(["certs", "sign", "--ca", str(ca_dir), "--request", str(csr), "--out", str(out)]) == 0
            signed.append(str(out))
        assert main(["certs", "install", "--dir", str(host), *signed]) == 0
    ca = _cert(ca_dir / "ca.pem")
    assert _keys(ca_dir) == {"ca.key"}  # the CA never held an operator's key
    for name, ip in hosts.items():
        host = tmp_path / name
        assert _keys(host) == ({f"{name}.key", f"{name}-signing.key"} if name != "dealer" else {"dealer.key"})
        cert = _cert(host / f"{name}.pem")
        cert.verify_directly_issued_by(ca)
        assert _cn(cert) == name and (host / f"{name}.key").stat().st_mode & 0o077 == 0
        ips = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert [str(i) for i in ips.get_values_for_type(x509.IPAddress)] == [ip]
        assert not list(host.glob("*.csr"))  # installed requests are removed
    signing = _cert(tmp_path / "party1" / "party1-signing.pem")
    usage = signing.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert [u.dotted_string for u in usage] == [certificate.DOCUMENT_SIGNING_OID]


def test_the_ca_refuses_a_dealer_signing_request_and_an_altered_request(tmp_path):
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    from mpc.plane.cert_requests import DOCUMENT_SIGNING_OID, subject
    from mpc.plane.certificate_authority import RequestRefused, make_ca, sign_request

    make_ca(tmp_path)
    key = ec.generate_private_key(ec.SECP256R1())
    dealer_signing = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(subject("dealer", "erasure certificates"))
        .add_extension(x509.ExtendedKeyUsage([x509.ObjectIdentifier(DOCUMENT_SIGNING_OID)]), critical=True)
        .sign(key, hashes.SHA256())
        .public_bytes(serialization.Encoding.PEM)
    )
    with pytest.raises(RequestRefused, match="sign erasure certificates"):
        sign_request(tmp_path, dealer_signing)
    no_usage = x509.CertificateSigningRequestBuilder().subject_name(subject("party0")).sign(key, hashes.SHA256())
    with pytest.raises(RequestRefused, match="no extended key usage"):
        sign_request(tmp_path, no_usage.public_bytes(serialization.Encoding.PEM))
    der = bytearray(no_usage.public_bytes(serialization.Encoding.DER))
    der[-5] ^= 0x01  # one bit of the signature
    with pytest.raises(RequestRefused):
        sign_request(tmp_path, x509.load_der_x509_csr(bytes(der)).public_bytes(serialization.Encoding.PEM))


def test_renewal_keeps_the_key_in_service_until_the_new_certificate_is_installed(tmp_path, capsys):
    ca_dir, host = tmp_path / "ca", tmp_path / "dealer"
    assert main(["certs", "ca", "--dir", str(ca_dir)]) == 0
    assert main(["certs", "request", "--name", "dealer", "--dir", str(host)]) == 0
    assert main(["certs", "sign", "--ca", str(ca_dir), "--request", str(host / "dealer.csr")]) == 0
    assert main(["certs", "install", "--dir", str(host), str(host / "dealer.pem")]) == 0
    old_key, old_cert = (host / "dealer.key").read_bytes(), (host / "dealer.pem").read_bytes()
    stale = tmp_path / "stale.pem"
    stale.write_bytes(old_cert)

    assert main(["certs", "request", "--name", "dealer", "--dir", str(host), "--renew"]) == 0
    assert (host / "dealer.key").read_bytes() == old_key and (host / "dealer.next.key").exists()
    new = tmp_path / "new.pem"
    assert main(["certs", "sign", "--ca", str(ca_dir), "--request", str(host / "dealer.csr"), "--out", str(new)]) == 0
    assert main(["certs", "install", "--dir", str(host), str(new)]) == 0
    assert (host / "dealer.key").read_bytes() != old_key and not (host / "dealer.next.key").exists()
    with pytest.raises(SystemExit, match="matches neither"):  # the old certificate no longer fits the key
        main(["certs", "install", "--dir", str(host), str(stale)])
    with pytest.raises(SystemExit, match="refusing to replace a CA"):
        main(["certs", "ca", "--dir", str(ca_dir)])
