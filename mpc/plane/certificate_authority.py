"""A deployment's certificate authority: it signs the certificate requests of party0, party1
and the dealer, and never sees their private keys.

Every process of a deployment — party0, party1 and the dealer — proves who it is with a
TLS certificate signed by the deployment's CA; its identity is the certificate's common
name (`party0`, `party1`, `dealer` by default). The gRPC channels and the MPC plane both
check it. The two parties also sign erasure certificates, with a separate key. Each
operator makes its keys and requests on its own host (`mpc.plane.cert_requests`); the CA:

* `make_ca(dir)` writes a new CA (ca.pem, ca.key);
* `sign_request(ca_dir, csr)` checks a request's own signature and returns the certificate
  of the profile the request asks for: TLS (server and client auth, the requested subject
  alternative names) or, for a party only, erasure signing (key usage digital signature +
  content commitment, extended key usage document signing, RFC 9336). A signing
  certificate signs erasure certificates only and cannot serve TLS; a TLS certificate is
  refused as a signer. The dealer signs nothing and has no signing pair. Any other request
  (another usage, a CA request, a malformed name) is refused.

One-machine runs and tests go through the same path in one directory: `make_certs(dir)`
(CA, then request, sign and install for every identity), `issue_cert` (a TLS rotation),
`issue_signing_cert` (a signing rotation; the old pair is kept under its serial number, and
erasure certificates signed with it stay verifiable: each carries its signing certificate
and is checked at its signing time). Keys are ECDSA P-256, written with mode 0600.
"""

from __future__ import annotations

import datetime as dt
import secrets
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, ObjectIdentifier

from mpc.durable import atomic_write
from mpc.plane.cert_requests import (
    DOCUMENT_SIGNING_OID,
    SIGNERS,
    common_name,
    install_cert,
    make_request,
    subject,
    write_key,
)

VALID_DAYS = 365
SIGNING_VALID_DAYS = 3 * 365  #: erasure-signing certificates outlive a TLS rotation
CA_VALID_DAYS = 5 * 365  #: the CA outlives its leaves; renew it by rolling a second CA in (docs/DEPLOY.md)
OPERATORS = ("party0", "party1", "dealer")
"""The default identities: the two computing parties and the dealer."""
_TLS_USAGE = {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
__all__ = ["DOCUMENT_SIGNING_OID", "SIGNERS", "OPERATORS", "make_ca", "sign_request", "make_certs"]


class RequestRefused(ValueError):
    """The CA does not sign this certificate request; the message says why."""


def make_ca(out_dir: Path, valid_days: float = CA_VALID_DAYS) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """Write a new CA certificate and key (ca.pem, ca.key) to `out_dir`."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = subject(f"Starfish CA {secrets.token_hex(4)}")  # distinct per deployment
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=valid_days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )  # key_cert_sign, crl_sign
        .sign(ca_key, hashes.SHA256())
    )
    atomic_write(out / "ca.pem", ca_cert.public_bytes(serialization.Encoding.PEM), mode=0o644)
    write_key(out / "ca.key", ca_key)
    return ca_cert, ca_key


def load_ca(out: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """The CA certificate and key in `out` (written by `make_ca`)."""
    out = Path(out)
    try:
        cert = x509.load_pem_x509_certificate((out / "ca.pem").read_bytes())
        key = serialization.load_pem_private_key((out / "ca.key").read_bytes(), password=None)
    except FileNotFoundError as exc:
        raise FileNotFoundError(f"{exc.filename} does not exist: issuing needs the CA's ca.pem and ca.key") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{out / 'ca.key'} is not an EC private key")
    return cert, key


def _requested_usage(csr: x509.CertificateSigningRequest) -> set:
    try:
        return set(csr.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)
    except x509.ExtensionNotFound:
        raise RequestRefused("the request names no extended key usage (TLS or document signing)") from None


def _checked(csr: x509.CertificateSigningRequest) -> tuple[str, bool]:
    """(identity, is a signing request) of a request the CA may sign, else RequestRefused."""
    if not csr.is_signature_valid:
        raise RequestRefused("the request's signature does not verify (altered or not made with its key)")
    if not isinstance(csr.public_key(), ec.EllipticCurvePublicKey):
        raise RequestRefused("the request's key is not an EC key")
    name = common_name(csr.subject)
    if not name or not name.replace("-", "").replace("_", "").isalnum():
        raise RequestRefused(f"the request's common name {name!r} is not an identity name")
    usage = _requested_usage(csr)
    if usage == {ObjectIdentifier(DOCUMENT_SIGNING_OID)}:
        if name not in SIGNERS:
            raise RequestRefused(f"only {' and '.join(SIGNERS)} sign erasure certificates, not {name!r}")
        return name, True
    if usage != _TLS_USAGE:
        raise RequestRefused("the request asks for usages other than TLS server + client auth or document signing")
    return name, False


def _profile(builder: x509.CertificateBuilder, csr: x509.CertificateSigningRequest, signing: bool):
    builder = builder.add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
    if signing:
        return builder.add_extension(
            x509.KeyUsage(True, True, False, False, False, False, False, False, False), critical=True
        ).add_extension(x509.ExtendedKeyUsage([ObjectIdentifier(DOCUMENT_SIGNING_OID)]), critical=True)
    name = common_name(csr.subject)
    try:
        san = csr.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        san = x509.SubjectAlternativeName([x509.DNSName(name)])
    return builder.add_extension(san, critical=False).add_extension(
        x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
    )


def sign_request(
    ca_dir: Path, csr_pem: bytes, valid_days: float | None = None, not_before: dt.datetime | None = None
) -> bytes:
    """The CA's certificate (PEM) for a request (see module doc); RequestRefused if it may not sign it."""
    try:
        csr = x509.load_pem_x509_csr(csr_pem)
    except ValueError as exc:
        raise RequestRefused(f"not a PEM certificate request: {exc}") from None
    name, signing = _checked(csr)
    ca_cert, ca_key = load_ca(Path(ca_dir))
    start = not_before or dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    days = valid_days if valid_days is not None else (SIGNING_VALID_DAYS if signing else VALID_DAYS)
    builder = (
        x509.CertificateBuilder()
        .subject_name(csr.subject)
        .issuer_name(ca_cert.subject)
        .public_key(csr.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(min(start + dt.timedelta(days=days), ca_cert.not_valid_after_utc))
    )
    return _profile(builder, csr, signing).sign(ca_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


def _issue(out: Path, name: str, signing: bool, renew: bool, **request) -> tuple[Path, Path]:
    """Request, sign and install one pair in `out` (which holds the CA): the one-machine path."""
    sign_opts = {k: request.pop(k) for k in ("valid_days", "not_before") if k in request}
    (csr,) = make_request(out, name, signing=signing, renew=renew, tls=not signing, **request)
    return install_cert(out, sign_request(out, csr.read_bytes(), **sign_opts))


def issue_cert(
    out_dir: Path,
    name: str,
    ips: tuple[str, ...] = ("127.0.0.1",),
    hosts: tuple[str, ...] = ("localhost",),
    valid_days: float = VALID_DAYS,
    not_before: dt.datetime | None = None,
) -> tuple[Path, Path]:
    """A new TLS key pair for identity `name`, signed by the CA in `out_dir`; returns (cert, key).

    An existing NAME.pem / NAME.key is replaced (rotation): processes that load their
    certificate per connection pick the new one up without a restart."""
    out = Path(out_dir)
    renew = (out / f"{name}.key").exists()
    return _issue(out, name, False, renew, ips=ips, hosts=hosts, valid_days=valid_days, not_before=not_before)


def issue_signing_cert(out_dir: Path, name: str) -> tuple[Path, Path]:
    """Issue (or rotate) party `name`'s erasure-signing pair with the CA in `out_dir`;
    returns (certificate path, key path). A previous pair is kept under its serial number."""
    if name not in SIGNERS:
        raise ValueError(f"only {' and '.join(SIGNERS)} sign erasure certificates, not {name!r}")
    out = Path(out_dir)
    return _issue(out, name, True, (out / f"{name}-signing.key").exists())


def make_certs(
    out_dir: Path,
    names: tuple[str, ...] = OPERATORS,
    ips: tuple[str, ...] = ("127.0.0.1",),
    hosts: tuple[str, ...] = ("localhost",),
) -> dict[str, Path]:
    """A new CA and, through request → sign → install, one TLS pair per name and a signing
    pair per party, all in `out_dir` (one-machine runs); returns the paths."""
    out = Path(out_dir)
    make_ca(out)
    paths = {"ca": out / "ca.pem", "ca_key": out / "ca.key"}
    for name in names:
        paths[name], paths[f"{name}_key"] = issue_cert(out, name, ips, hosts)
        if name in SIGNERS:
            paths[f"{name}_signing"], paths[f"{name}_signing_key"] = issue_signing_cert(out, name)
    return paths


def not_after(cert_path: Path) -> float:
    """Unix time at which the (first) certificate in `cert_path` expires."""
    cert = x509.load_pem_x509_certificate(Path(cert_path).read_bytes())
    return cert.not_valid_after_utc.timestamp()
