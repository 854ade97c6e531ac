"""A local certificate authority and party certificates (for the demo and tests).

`make_certs(out_dir)` writes ca.pem/ca.key and, per party, partyN.pem/partyN.key with
common name `partyN` and subject alternative names for the party name, `localhost`
and the given IP addresses. Private keys are written with mode 0600. In deployment
each operator keeps its own key; this helper is for one-machine runs.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_DAYS = 365


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    data = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def _name(cn: str) -> x509.Name:
    return x509.Name(
        [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Starfish"), x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    )


def make_certs(
    out_dir: Path,
    names: tuple[str, ...] = ("party0", "party1"),
    ips: tuple[str, ...] = ("127.0.0.1",),
    hosts: tuple[str, ...] = ("localhost",),
) -> dict[str, Path]:
    """Create a CA and one certificate per name (server and client auth); returns the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name("Starfish local CA"))
        .issuer_name(_name("Starfish local CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    paths = {"ca": out / "ca.pem", "ca_key": out / "ca.key"}
    paths["ca"].write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    _write_key(paths["ca_key"], ca_key)
    for name in names:
        key = ec.generate_private_key(ec.SECP256R1())
        san = [
            x509.DNSName(name),
            *[x509.DNSName(h) for h in hosts],
            *[x509.IPAddress(ipaddress.ip_address(i)) for i in ips],
        ]
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(name))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=VALID_DAYS))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName(san), critical=False)
            .add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                critical=False,
            )
            .sign(ca_key, hashes.SHA256())
        )
        paths[name] = out / f"{name}.pem"
        paths[f"{name}_key"] = out / f"{name}.key"
        paths[name].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(paths[f"{name}_key"], key)
    return paths
