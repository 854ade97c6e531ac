"""The individual preflight checks; each returns `Check` rows (PASS, WARN or FAIL + reason).

Reasons are stable phrases the tests and operators can search for: "expired", "not yet
valid", "expires in", "identity", "not signed by the CA", "does not match", "unreadable",
"readable by group or others", "owned by", "in use", "unreachable", "TLS", "clock".
"""

from __future__ import annotations

import ctypes
import ctypes.util
import datetime as dt
import errno
import grp
import os
import pwd
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization

from mpc.plane.cert_requests import DOCUMENT_SIGNING_OID, common_name

PASS, WARN, FAIL = "PASS", "WARN", "FAIL"


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    detail: str


def key_file(path: Path, user: str | None) -> list[Check]:
    """The key is readable by the service user, by nobody else, and owned by that user."""
    name = f"key {path}"
    try:
        st = path.stat()
        path.read_bytes()
    except FileNotFoundError:
        return [Check(name, FAIL, "missing")]
    except PermissionError:
        return [Check(name, FAIL, f"unreadable by {_owner(os.geteuid())}: permission denied")]
    mode = st.st_mode & 0o777
    if user is not None and not _can_read(st, user):
        return [Check(name, FAIL, f"unreadable by {user}: permission denied (owner {_owner(st.st_uid)}, {mode:04o})")]
    if st.st_mode & 0o077:
        return [Check(name, FAIL, f"readable by group or others (mode {mode:04o}); chmod 0600")]
    if user is not None and _owner(st.st_uid) != user:
        return [Check(name, FAIL, f"owned by {_owner(st.st_uid)}, not the service user {user}")]
    return [Check(name, PASS, f"mode {mode:04o}, owner {_owner(st.st_uid)}")]


def _can_read(st: os.stat_result, user: str) -> bool:
    """Whether `user` may read a file with this owner and mode (root reads everything)."""
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        return False
    if entry.pw_uid == 0 or st.st_mode & 0o004:
        return True
    if st.st_uid == entry.pw_uid:
        return bool(st.st_mode & 0o400)
    groups = {entry.pw_gid, *(g.gr_gid for g in grp.getgrall() if user in g.gr_mem)}
    return st.st_gid in groups and bool(st.st_mode & 0o040)


def _owner(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _load_cert(path: Path) -> x509.Certificate | Check:
    try:
        return x509.load_pem_x509_certificate(path.read_bytes())
    except FileNotFoundError:
        return Check(f"certificate {path}", FAIL, "missing")
    except (PermissionError, ValueError) as exc:
        return Check(f"certificate {path}", FAIL, f"unreadable: {exc}")


def _validity(cert: x509.Certificate, warn_days: float, now: dt.datetime) -> tuple[str, str]:
    if cert.not_valid_after_utc <= now:
        return FAIL, f"expired on {cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC"
    if cert.not_valid_before_utc > now:
        return FAIL, f"not yet valid (from {cert.not_valid_before_utc:%Y-%m-%d %H:%M} UTC): check the clock"
    left = (cert.not_valid_after_utc - now).total_seconds() / 86400
    if left < warn_days:
        return WARN, f"expires in {left:.1f} days ({cert.not_valid_after_utc:%Y-%m-%d}): renew it"
    return PASS, f"valid until {cert.not_valid_after_utc:%Y-%m-%d} ({left:.0f} days)"


def _key_matches(cert: x509.Certificate, key_path: Path) -> bool:
    try:
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except (OSError, ValueError):
        return True  # the key's own check reports it
    fmt = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return key.public_key().public_bytes(*fmt) == cert.public_key().public_bytes(*fmt)


def certificate(path: Path, key: Path, ca: Path, identity: str, warn_days: float, signing: bool = False) -> list[Check]:
    """Present, signed by the CA, naming `identity`, matching its key, unexpired (warn ahead)."""
    name = f"{'signing' if signing else 'TLS'} certificate {path.name}"
    cert = _load_cert(path)
    if isinstance(cert, Check):
        return [cert]
    ca_cert = _load_cert(ca)
    if isinstance(ca_cert, Check):
        return [ca_cert]
    status, detail = _validity(cert, warn_days, dt.datetime.now(dt.UTC))
    rows = [Check(f"{name}: validity", status, detail)]
    cn = common_name(cert.subject)
    rows.append(
        Check(f"{name}: identity", PASS, f"names {cn!r}")
        if cn == identity
        else Check(f"{name}: identity", FAIL, f"wrong identity: names {cn!r}, expected {identity!r}")
    )
    try:
        cert.verify_directly_issued_by(ca_cert)
        rows.append(Check(f"{name}: chain", PASS, f"signed by {common_name(ca_cert.subject)}"))
    except (ValueError, TypeError, InvalidSignature) as exc:
        rows.append(Check(f"{name}: chain", FAIL, f"not signed by the CA in {ca}: {type(exc).__name__}"))
    if not _key_matches(cert, key):
        rows.append(Check(f"{name}: key", FAIL, f"does not match the key {key}"))
    if signing:
        usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        if [u.dotted_string for u in usage] != [DOCUMENT_SIGNING_OID]:
            rows.append(Check(f"{name}: usage", FAIL, "not a document-signing certificate"))
    return rows


def bindable(address: str, what: str) -> Check:
    """The service can bind `address` (host:port): nothing else listens there."""
    host, _, port = address.rpartition(":")
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host.strip("[]"), int(port)))
            sock.listen(1)
        except OSError as exc:
            reason = "in use by another process" if exc.errno == errno.EADDRINUSE else exc.strerror
            return Check(f"bind {what} {address}", FAIL, f"{address} {reason}")
    return Check(f"bind {what} {address}", PASS, "free")


def reachable(address: str, identity: str, ca: Path, cert: Path, key: Path, what: str, timeout_s: float) -> Check:
    """Mutual TLS 1.3 to `address`, whose certificate must chain to the CA and name `identity`."""
    name = f"reach {what} {address}"
    host, _, port = address.rpartition(":")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.check_hostname = False
    ctx.load_verify_locations(cafile=str(ca))
    ctx.set_alpn_protocols(["h2", "starfish"])
    try:
        ctx.load_cert_chain(str(cert), str(key))
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s) as raw:
            with ctx.wrap_socket(raw) as tls:
                version, peer = tls.version(), tls.getpeercert() or {}
    except (ssl.SSLError, ssl.CertificateError) as exc:
        return Check(name, FAIL, f"TLS handshake refused: {exc}")
    except OSError as exc:
        return Check(name, FAIL, f"unreachable: {exc.strerror or exc}")
    cn = next((v for rdn in peer.get("subject", ()) for k, v in rdn if k == "commonName"), "")
    if cn != identity:
        return Check(name, FAIL, f"wrong identity: the peer presents {cn!r}, expected {identity!r}")
    return Check(name, PASS, f"{version}, identity {cn!r}")


def serving(address: str, identity: str, ca: Path, cert: Path, key: Path, timeout_s: float) -> Check:
    """The gRPC health service at `address` presents `identity` over TLS 1.3 and answers
    SERVING for the overall service (the dealer's `[observability] health_listen`)."""
    tls = reachable(address, identity, ca, cert, key, "health", timeout_s)
    name = f"health {address}"
    if tls.status != PASS:
        return Check(name, FAIL, tls.detail)
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    creds = grpc.ssl_channel_credentials(root_certificates=Path(ca).read_bytes())
    options = [("grpc.ssl_target_name_override", "localhost")]  # the identity was checked above
    with grpc.secure_channel(address, creds, options=options) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=timeout_s)
        except grpc.RpcError as exc:
            return Check(name, FAIL, f"no health answer: {exc.code().name}")
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    return Check(name, PASS if status == "SERVING" else FAIL, f"{status}, {tls.detail}")


class _Timex(ctypes.Structure):
    _fields_ = [("modes", ctypes.c_uint), ("_pad", ctypes.c_long * 25)]


def clock() -> Check:
    """The kernel's clock is synchronized (adjtimex reports no TIME_ERROR): certificates'
    validity and session deadlines assume the three hosts agree within seconds."""
    libc = ctypes.util.find_library("c")
    if libc is None:
        return Check("clock", WARN, "cannot query the kernel clock state")
    state = ctypes.CDLL(libc, use_errno=True).adjtimex(ctypes.byref(_Timex()))
    if state == 5:  # TIME_ERROR: not synchronized to a time source
        return Check("clock", WARN, "clock not synchronized (start NTP, e.g. systemd-timesyncd or chrony)")
    if state < 0:
        return Check("clock", WARN, "cannot query the kernel clock state")
    return Check("clock", PASS, f"synchronized; UTC now {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M:%S}")
