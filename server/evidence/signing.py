"""A party's erasure-signing identity: the `[signing]` certificate and key.

The key signs erasure certificates only (`proto.certificate`); TLS keeps its own key.
Loading checks what a verifier will check (`proto.certificate_verify.usage_problem`), so
a misconfigured party fails at start instead of producing certificates nobody can
verify: the certificate names this party (common name `partyN`), is issued for document
signing only, and holds the public half of the configured key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from proto.certificate import sign, signing_payload, utc_iso
from proto.certificate_verify import usage_problem
from server.config import PartyConfig


class SigningError(ValueError):
    """The configured signing certificate or key cannot sign erasure certificates."""


@dataclass(frozen=True)
class SigningIdentity:
    name: str  #: party0 or party1
    certificate_pem: str
    private_key: Any

    def sign_statement(self, statement: dict[str, Any], now: float) -> dict[str, str]:
        """This party's signature entry of an erasure certificate (see `proto.certificate`)."""
        signed_at = utc_iso(now)
        algorithm, signature = sign(self.private_key, signing_payload(statement, self.name, signed_at))
        return {
            "signer": self.name,
            "signed_at": signed_at,
            "algorithm": algorithm,
            "signature": signature,
            "certificate": self.certificate_pem,
        }


def _spki(public_key) -> bytes:
    return public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def load_identity(cfg: PartyConfig) -> SigningIdentity | None:
    """This party's signing identity, or None when `[signing]` is not configured."""
    if cfg.signing.cert is None or cfg.signing.key is None:
        return None
    try:
        pem = cfg.signing.cert.read_bytes()
        key = serialization.load_pem_private_key(cfg.signing.key.read_bytes(), password=None)
        cert = x509.load_pem_x509_certificate(pem)
    except FileNotFoundError as exc:
        raise SigningError(f"signing file {exc.filename} does not exist (run `starfish certs`)") from None
    except ValueError as exc:
        raise SigningError(f"signing certificate or key cannot be read: {exc}") from None
    problem = usage_problem(cert, cfg.name)
    if problem:
        raise SigningError(f"[signing] cert {cfg.signing.cert}: {problem}")
    if _spki(key.public_key()) != _spki(cert.public_key()):
        raise SigningError("the [signing] key does not belong to the [signing] certificate")
    return SigningIdentity(cfg.name, pem.decode("ascii"), key)
