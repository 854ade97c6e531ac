"""An operator's side of its certificates: its own private keys, the certificate requests it
sends to the CA, and installing the certificates the CA sends back.

Key custody (docs/DEPLOY.md §3): every operator generates its TLS key — and each party its
erasure-signing key — on its own host; only a certificate signing request (PKCS #10, PEM)
leaves the host, and the CA (`mpc.plane.certificate_authority.sign_request`) never sees a private key.

* `make_request(dir, name, ips, hosts)` writes NAME.key (mode 0600) and NAME.csr: subject
  O=Starfish, CN=NAME, the subject alternative names and the extended key usage asked for
  (server + client auth). With `signing=True` (parties only) also NAME-signing.key and
  NAME-signing.csr (OU "erasure certificates", extended key usage document signing).
* Renewal (`renew=True`) writes the new key as NAME.next.key beside the one in service, so
  the running process keeps a matching pair until the new certificate arrives.
* `install_cert(dir, pem)` checks that the certificate's public key matches NAME.next.key or
  NAME.key and then puts the pair in place (NAME.pem / NAME.key, or the signing pair; the
  previous signing pair is kept under its serial number, so what it signed stays verifiable).

Every file is written to a temporary name, fsynced and renamed.
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID, ObjectIdentifier

from mpc.durable import atomic_write

SIGNERS = ("party0", "party1")
"""The identities that sign erasure certificates."""
DOCUMENT_SIGNING_OID = "1.3.6.1.5.5.7.3.36"
"""id-kp-documentSigning (RFC 9336); the verifier (`proto.certificate`) requires the same."""
SIGNING_UNIT = "erasure certificates"
"""The organizational unit that marks an erasure-signing certificate."""


def write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    data = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    atomic_write(path, data)


def subject(cn: str, unit: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Starfish")]
    if unit:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, unit))
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attrs)


def stem(name: str, signing: bool) -> str:
    """File stem of an identity's pair: NAME (TLS) or NAME-signing."""
    return f"{name}-signing" if signing else name


def _request(key: ec.EllipticCurvePrivateKey, name: str, ips: tuple[str, ...], hosts: tuple[str, ...]) -> bytes:
    san = [
        x509.DNSName(name),
        *[x509.DNSName(h) for h in hosts if h != name],
        *[x509.IPAddress(ipaddress.ip_address(i)) for i in ips],
    ]
    usage = x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH])
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(subject(name))
        .add_extension(x509.SubjectAlternativeName(san), critical=False)
        .add_extension(usage, critical=False)
        .sign(key, hashes.SHA256())
    )
    return csr.public_bytes(serialization.Encoding.PEM)


def _signing_request(key: ec.EllipticCurvePrivateKey, name: str) -> bytes:
    usage = x509.ExtendedKeyUsage([ObjectIdentifier(DOCUMENT_SIGNING_OID)])
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(subject(name, SIGNING_UNIT))
        .add_extension(usage, critical=True)
        .sign(key, hashes.SHA256())
    )
    return csr.public_bytes(serialization.Encoding.PEM)


def make_request(
    out_dir: Path,
    name: str,
    ips: tuple[str, ...] = ("127.0.0.1",),
    hosts: tuple[str, ...] = ("localhost",),
    signing: bool = False,
    renew: bool = False,
    tls: bool = True,
) -> list[Path]:
    """Generate `name`'s key(s) here and write the request(s) to send: the TLS pair's (unless
    `tls` is false) and, with `signing`, the erasure-signing pair's; returns the CSR paths."""
    if signing and name not in SIGNERS:
        raise ValueError(f"only {' and '.join(SIGNERS)} sign erasure certificates, not {name!r}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    made = []
    for is_signing in (False,) * tls + (True,) * signing:
        key = ec.generate_private_key(ec.SECP256R1())
        base = stem(name, is_signing)
        write_key(out / (f"{base}.next.key" if renew else f"{base}.key"), key)
        csr = _signing_request(key, name) if is_signing else _request(key, name, ips, hosts)
        atomic_write(out / f"{base}.csr", csr, mode=0o644)
        made.append(out / f"{base}.csr")
    return made


def is_signing_cert(cert: x509.Certificate) -> bool:
    units = cert.subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME)
    return any(u.value == SIGNING_UNIT for u in units)


def common_name(name: x509.Name) -> str:
    attrs = name.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(attrs[0].value) if attrs else ""


def _same_key(key_path: Path, cert: x509.Certificate) -> bool:
    if not key_path.is_file():
        return False
    key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    fmt = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return key.public_key().public_bytes(*fmt) == cert.public_key().public_bytes(*fmt)


def install_cert(out_dir: Path, pem: bytes) -> tuple[Path, Path]:
    """Put a certificate the CA signed beside its key (see module doc); returns (cert, key)."""
    out = Path(out_dir)
    cert = x509.load_pem_x509_certificate(pem)
    base = stem(common_name(cert.subject), is_signing_cert(cert))
    cert_path, key_path, pending = out / f"{base}.pem", out / f"{base}.key", out / f"{base}.next.key"
    if _same_key(pending, cert):
        if is_signing_cert(cert) and cert_path.exists() and key_path.exists():
            old = x509.load_pem_x509_certificate(cert_path.read_bytes())
            cert_path.rename(out / f"{base}-{old.serial_number:x}.pem")
            key_path.rename(out / f"{base}-{old.serial_number:x}.key")
        os.replace(pending, key_path)
    elif not _same_key(key_path, cert):
        raise ValueError(f"the certificate for {base} matches neither {pending.name} nor {key_path.name} in {out}")
    atomic_write(cert_path, pem, mode=0o644)
    (out / f"{base}.csr").unlink(missing_ok=True)
    return cert_path, key_path
