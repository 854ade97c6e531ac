"""A deployment's certificate authority, its operators' TLS certificates and the parties'
erasure-signing certificates.

Every process of a deployment — party0, party1 and the dealer — proves who it is with a
TLS certificate signed by the deployment's CA; its identity is the certificate's common
name (`party0`, `party1`, `dealer` by default). The gRPC channels and the MPC plane both
check it. The two parties also sign erasure certificates, with a separate key:

* `make_certs(out_dir)` writes a new CA (ca.pem / ca.key), one TLS certificate per name
  (NAME.pem / NAME.key: server and client auth, subject alternative names for the name,
  `localhost` and the given IP addresses) and, per party, the erasure-signing certificate
  (partyN-signing.pem / partyN-signing.key: common name `partyN`, key usage digital
  signature + content commitment, extended key usage document signing, RFC 9336). A
  signing certificate signs erasure certificates only and cannot serve TLS; a TLS
  certificate is refused as a signer. The dealer signs nothing and has no signing pair;
* `issue_cert(out_dir, name)` signs a fresh TLS key pair for `name` with the CA already in
  `out_dir` — certificate rotation, or adding an operator's host addresses;
* `issue_signing_cert(out_dir, party)` rotates a party's signing pair without touching
  TLS; the old pair is kept under its serial number, and erasure certificates signed with
  it stay verifiable (each carries its signing certificate and is checked at its signing
  time).

Keys are ECDSA P-256, written with mode 0600; every file is written to a temporary name,
fsynced and renamed, so a process reading it sees the old or the new file, never half of
one. In a deployment each operator keeps its own key; these helpers serve one-machine
runs, tests, and the CA holder issuing certificates (docs/DEPLOY.md).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import secrets
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID, ObjectIdentifier

VALID_DAYS = 365
SIGNING_VALID_DAYS = 3 * 365  #: erasure-signing certificates outlive a TLS rotation
OPERATORS = ("party0", "party1", "dealer")
"""The default identities: the two computing parties and the dealer."""
SIGNERS = ("party0", "party1")
"""The identities that sign erasure certificates."""
DOCUMENT_SIGNING_OID = "1.3.6.1.5.5.7.3.36"
"""id-kp-documentSigning (RFC 9336); the verifier (`proto.certificate`) requires the same."""


def _write(path: Path, data: bytes, mode: int) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    data = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    _write(path, data, 0o600)


def _name(cn: str, unit: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Starfish")]
    if unit:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, unit))
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attrs)


def _new_ca(out: Path, now: dt.datetime) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name(f"Starfish CA {secrets.token_hex(4)}")  # distinct per deployment
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )  # key_cert_sign, crl_sign
        .sign(ca_key, hashes.SHA256())
    )
    _write(out / "ca.pem", ca_cert.public_bytes(serialization.Encoding.PEM), 0o644)
    _write_key(out / "ca.key", ca_key)
    return ca_cert, ca_key


def load_ca(out: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """The CA certificate and key in `out` (written by `make_certs`)."""
    out = Path(out)
    try:
        cert = x509.load_pem_x509_certificate((out / "ca.pem").read_bytes())
        key = serialization.load_pem_private_key((out / "ca.key").read_bytes(), password=None)
    except FileNotFoundError as exc:
        raise FileNotFoundError(f"{exc.filename} does not exist: issuing needs the CA's ca.pem and ca.key") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{out / 'ca.key'} is not an EC private key")
    return cert, key


def _sign(
    ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey],
    name: str,
    ips: tuple[str, ...],
    hosts: tuple[str, ...],
    not_before: dt.datetime,
    not_after: dt.datetime,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    san = [
        x509.DNSName(name),
        *[x509.DNSName(h) for h in hosts if h != name],
        *[x509.IPAddress(ipaddress.ip_address(i)) for i in ips],
    ]
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(name))
        .issuer_name(ca[0].subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(san), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
        .sign(ca[1], hashes.SHA256())
    )
    return cert, key


def issue_cert(
    out_dir: Path,
    name: str,
    ips: tuple[str, ...] = ("127.0.0.1",),
    hosts: tuple[str, ...] = ("localhost",),
    valid_days: float = VALID_DAYS,
    not_before: dt.datetime | None = None,
) -> tuple[Path, Path]:
    """Sign a new key pair for identity `name` with the CA in `out_dir`; returns (cert, key).

    An existing NAME.pem / NAME.key is replaced (rotation): processes that load their
    certificate per connection pick the new one up without a restart."""
    out = Path(out_dir)
    start = not_before or dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    cert, key = _sign(load_ca(out), name, ips, hosts, start, start + dt.timedelta(days=valid_days))
    cert_path, key_path = out / f"{name}.pem", out / f"{name}.key"
    _write_key(key_path, key)
    _write(cert_path, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    return cert_path, key_path


def issue_signing_cert(
    out_dir: Path, name: str, ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None = None
) -> tuple[Path, Path]:
    """Issue (or rotate) party `name`'s erasure-signing certificate and key from the CA in
    `out_dir`; returns (certificate path, key path). A previous pair is kept under its
    serial number, so the old certificate stays at hand for the records."""
    if name not in SIGNERS:
        raise ValueError(f"only {' and '.join(SIGNERS)} sign erasure certificates, not {name!r}")
    out = Path(out_dir)
    ca_cert, ca_key = ca or load_ca(out)
    cert_path, key_path = out / f"{name}-signing.pem", out / f"{name}-signing.key"
    if cert_path.exists() and key_path.exists():
        old = x509.load_pem_x509_certificate(cert_path.read_bytes())
        cert_path.rename(out / f"{name}-signing-{old.serial_number:x}.pem")
        key_path.rename(out / f"{name}-signing-{old.serial_number:x}.key")
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(name, "erasure certificates"))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=SIGNING_VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(True, True, False, False, False, False, False, False, False), critical=True
        )  # digital_signature, content_commitment
        .add_extension(x509.ExtendedKeyUsage([ObjectIdentifier(DOCUMENT_SIGNING_OID)]), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    _write_key(key_path, key)
    _write(cert_path, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    return cert_path, key_path


def make_certs(
    out_dir: Path,
    names: tuple[str, ...] = OPERATORS,
    ips: tuple[str, ...] = ("127.0.0.1",),
    hosts: tuple[str, ...] = ("localhost",),
) -> dict[str, Path]:
    """Create a new CA, one TLS certificate per name and a signing pair per party; returns the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ca = _new_ca(out, dt.datetime.now(dt.UTC))
    paths = {"ca": out / "ca.pem", "ca_key": out / "ca.key"}
    for name in names:
        paths[name], paths[f"{name}_key"] = issue_cert(out, name, ips, hosts)
        if name in SIGNERS:
            paths[f"{name}_signing"], paths[f"{name}_signing_key"] = issue_signing_cert(out, name, ca)
    return paths
