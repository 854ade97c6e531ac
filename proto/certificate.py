"""The erasure certificate's encoding: canonical JSON, the signed payload, signatures.

An erasure certificate is a JSON document::

    {"format": FORMAT,
     "statement": {...what both parties attest...},
     "signatures": [{"signer": "party0", "signed_at": ISO-8601 UTC, "algorithm": ...,
                     "signature": base64, "certificate": PEM of the signing certificate}, ...]}

Each party signs `signing_payload(statement, signer, signed_at)`: the canonical JSON
(RFC 8785, JSON Canonicalization Scheme) of {"format", "signer", "signed_at",
"statement"}. Signing the canonical form, not the file's bytes, lets the file be
pretty-printed and still verified by any JCS implementation; naming the signer and
the format inside the payload stops a signature from being moved to another role or
another kind of document. Nothing is pickled; the encoding is deterministic.

Signing keys are the parties' erasure-signing keys (`starfish certs` issues them with
the document-signing extended key usage, RFC 9336); EC keys sign with ECDSA-SHA256,
Ed25519 keys with Ed25519, RSA keys with RSA-PSS-SHA256.
"""

from __future__ import annotations

import base64
import datetime as dt
import math
from decimal import Decimal
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa

FORMAT = "starfish-erasure-certificate/1"
SIGNERS = ("party0", "party1")  #: every certificate carries one signature of each
#: id-kp-documentSigning (RFC 9336): the extended key usage of an erasure-signing certificate
DOCUMENT_SIGNING_OID = "1.3.6.1.5.5.7.3.36"
#: RFC 8785 numbers are IEEE doubles: integers up to this are written as they are, larger ones as
#: the nearest double (the statement's counts stay far below)
MAX_SAFE_INTEGER = 2**53 - 1


class CanonicalError(ValueError):
    """A value has no canonical JSON form (NaN, infinity, huge integer, non-string key)."""


def _number(x: float) -> str:
    """ECMAScript Number.prototype.toString of a finite double (RFC 8785 §3.2.2.3)."""
    if x == 0:
        return "0"
    sign, rest = ("-", -x) if x < 0 else ("", x)
    digits_t = Decimal(repr(rest)).normalize().as_tuple()  # repr: the shortest round-trip digits
    digits = "".join(map(str, digits_t.digits))
    k = len(digits)
    n = k + int(digits_t.exponent)  # value = 0.digits × 10^n
    if k <= n <= 21:
        return sign + digits + "0" * (n - k)
    if 0 < n <= 21:
        return sign + digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return sign + "0." + "0" * (-n) + digits
    exp = n - 1
    mantissa = digits if k == 1 else digits[0] + "." + digits[1:]
    return f"{sign}{mantissa}e{'+' if exp > 0 else '-'}{abs(exp)}"


def _string(s: str) -> str:
    out = ['"']
    for ch in s:
        code = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif code < 0x20:
            short = {"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}.get(ch)
            out.append(short or f"\\u{code:04x}")
        elif 0xD800 <= code <= 0xDFFF:
            raise CanonicalError("a string holds a lone surrogate; it has no UTF-8 form")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _encode(value: Any, out: list[str]) -> None:
    if value is None or isinstance(value, bool):
        out.append({None: "null", True: "true", False: "false"}[value])
    elif isinstance(value, int):
        if abs(value) <= MAX_SAFE_INTEGER:
            out.append(str(value))
        elif abs(value) < 2**1024:  # a JSON number is a double (RFC 8785 §3.2.2.3): the nearest one
            out.append(_number(float(value)))
        else:
            raise CanonicalError(f"integer {value} is beyond the range of an IEEE double")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise CanonicalError(f"{value} has no JSON form")
        out.append(_number(value))
    elif isinstance(value, str):
        out.append(_string(value))
    elif isinstance(value, (list, tuple)):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _encode(item, out)
        out.append("]")
    elif isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise CanonicalError("object keys must be strings")
        out.append("{")
        for i, key in enumerate(sorted(value, key=lambda k: k.encode("utf-16-be"))):
            if i:
                out.append(",")
            out.append(_string(key))
            out.append(":")
            _encode(value[key], out)
        out.append("}")
    else:
        raise CanonicalError(f"{type(value).__name__} has no JSON form")


def canonical_json(value: Any) -> bytes:
    """RFC 8785 canonical JSON (UTF-8): keys sorted by UTF-16 code units, no whitespace,
    numbers as ECMAScript prints them, strings with minimal escapes."""
    out: list[str] = []
    _encode(value, out)
    return "".join(out).encode("utf-8")


def utc_iso(timestamp: float) -> str:
    """A unix time as ISO 8601 UTC with microseconds, e.g. 2025-01-31T12:00:00.000000Z."""
    return dt.datetime.fromtimestamp(timestamp, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_utc_iso(text: str) -> dt.datetime:
    """Inverse of `utc_iso` (raises ValueError for another form)."""
    return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC)


def signing_payload(statement: dict[str, Any], signer: str, signed_at: str) -> bytes:
    """The bytes a party signs: canonical JSON of the statement, the signer's role and the time."""
    return canonical_json({"format": FORMAT, "signer": signer, "signed_at": signed_at, "statement": statement})


def algorithm_of(public_key) -> str:
    """The signature algorithm a key of this type uses in a certificate."""
    if isinstance(public_key, ec.EllipticCurvePublicKey):
        return f"ecdsa-{public_key.curve.name}-sha256"
    if isinstance(public_key, ed25519.Ed25519PublicKey):
        return "ed25519"
    if isinstance(public_key, rsa.RSAPublicKey):
        return "rsa-pss-sha256"
    raise ValueError(f"unsupported signing key type {type(public_key).__name__}")


def sign(private_key, payload: bytes) -> tuple[str, str]:
    """Sign `payload`; returns (algorithm, base64 signature)."""
    algorithm = algorithm_of(private_key.public_key())
    if isinstance(private_key, ec.EllipticCurvePrivateKey):
        raw = private_key.sign(payload, ec.ECDSA(hashes.SHA256()))
    elif isinstance(private_key, ed25519.Ed25519PrivateKey):
        raw = private_key.sign(payload)
    else:
        raw = private_key.sign(payload, _pss(), hashes.SHA256())
    return algorithm, base64.b64encode(raw).decode("ascii")


def _pss() -> padding.PSS:
    return padding.PSS(mgf=padding.MGF1(hashes.SHA256()), salt_length=padding.PSS.DIGEST_LENGTH)


def signature_valid(public_key, algorithm: str, payload: bytes, signature_b64: str) -> bool:
    """True when `signature_b64` is a valid signature of `payload` under `public_key` with
    `algorithm` (which must be the algorithm of that key's type)."""
    try:
        if algorithm != algorithm_of(public_key):
            return False
        raw = base64.b64decode(signature_b64, validate=True)
        if isinstance(public_key, ec.EllipticCurvePublicKey):
            public_key.verify(raw, payload, ec.ECDSA(hashes.SHA256()))
        elif isinstance(public_key, ed25519.Ed25519PublicKey):
            public_key.verify(raw, payload)
        else:
            public_key.verify(raw, payload, _pss(), hashes.SHA256())
    except (InvalidSignature, ValueError):
        return False
    return True
