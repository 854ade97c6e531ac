"""A local certificate authority, party TLS certificates and erasure-signing certificates.

`make_certs(out_dir)` writes ca.pem/ca.key and, per party:

* partyN.pem/partyN.key — the TLS certificate (common name `partyN`, subject alternative
  names for the party name, `localhost` and the given IP addresses; server and client auth);
* partyN-signing.pem/partyN-signing.key — the erasure-signing certificate (common name
  `partyN`, key usage digital signature + content commitment, extended key usage
  document signing, RFC 9336). It signs erasure certificates only; a TLS certificate is
  refused as a signer, and a signing certificate cannot serve TLS.

A separate signing key can be rotated without touching TLS (`issue_signing_cert` with the
same CA: certificates signed with the old key stay verifiable, since each carries its
signing certificate and is checked at its signing time). Private keys are written with
mode 0600. In deployment each operator keeps its own keys; this helper is for
one-machine runs and for issuing from an operator's own CA.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID, ObjectIdentifier

from proto.certificate import DOCUMENT_SIGNING_OID

VALID_DAYS = 365
SIGNING_VALID_DAYS = 3 * 365  #: erasure-signing certificates outlive a TLS rotation


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    data = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def _name(cn: str, unit: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Starfish")]
    if unit:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, unit))
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attrs)


def _builder(subject: x509.Name, issuer: x509.Name, public_key, days: int) -> x509.CertificateBuilder:
    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
    )


def _make_ca(out: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        _builder(_name("Starfish local CA"), _name("Starfish local CA"), key.public_key(), VALID_DAYS)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )  # key_cert_sign, crl_sign
        .sign(key, hashes.SHA256())
    )
    (out / "ca.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(out / "ca.key", key)
    return cert, key


def load_ca(out_dir: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """The CA certificate and key written by `make_certs` into `out_dir`."""
    out = Path(out_dir)
    cert = x509.load_pem_x509_certificate((out / "ca.pem").read_bytes())
    key = serialization.load_pem_private_key((out / "ca.key").read_bytes(), password=None)
    return cert, key  # type: ignore[return-value]


def _tls_cert(out: Path, ca, name: str, ips: tuple[str, ...], hosts: tuple[str, ...]) -> None:
    ca_cert, ca_key = ca
    key = ec.generate_private_key(ec.SECP256R1())
    san = [
        x509.DNSName(name),
        *[x509.DNSName(h) for h in hosts],
        *[x509.IPAddress(ipaddress.ip_address(i)) for i in ips],
    ]
    cert = (
        _builder(_name(name), ca_cert.subject, key.public_key(), VALID_DAYS)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(san), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    (out / f"{name}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(out / f"{name}.key", key)


def issue_signing_cert(out_dir: Path, name: str, ca=None) -> tuple[Path, Path]:
    """Issue (or rotate) `name`'s erasure-signing certificate and key from the CA in
    `out_dir`; returns (certificate path, key path). A previous pair is kept under its
    serial number, so the old certificate stays at hand for the records."""
    out = Path(out_dir)
    ca_cert, ca_key = ca or load_ca(out)
    cert_path, key_path = out / f"{name}-signing.pem", out / f"{name}-signing.key"
    if cert_path.exists() and key_path.exists():
        old = x509.load_pem_x509_certificate(cert_path.read_bytes())
        cert_path.rename(out / f"{name}-signing-{old.serial_number:x}.pem")
        key_path.rename(out / f"{name}-signing-{old.serial_number:x}.key")
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        _builder(_name(name, "erasure certificates"), ca_cert.subject, key.public_key(), SIGNING_VALID_DAYS)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(True, True, False, False, False, False, False, False, False), critical=True
        )  # digital_signature, content_commitment
        .add_extension(x509.ExtendedKeyUsage([ObjectIdentifier(DOCUMENT_SIGNING_OID)]), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key_path, key)
    return cert_path, key_path


def make_certs(
    out_dir: Path,
    names: tuple[str, ...] = ("party0", "party1"),
    ips: tuple[str, ...] = ("127.0.0.1",),
    hosts: tuple[str, ...] = ("localhost",),
) -> dict[str, Path]:
    """Create a CA and, per name, a TLS and an erasure-signing certificate; returns the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ca = _make_ca(out)
    paths = {"ca": out / "ca.pem", "ca_key": out / "ca.key"}
    for name in names:
        _tls_cert(out, ca, name, ips, hosts)
        paths[name], paths[f"{name}_key"] = out / f"{name}.pem", out / f"{name}.key"
        paths[f"{name}_signing"], paths[f"{name}_signing_key"] = issue_signing_cert(out, name, ca)
    return paths
