"""Signed erasure certificates made with real keys from `starfish certs`, for the verifier tests.

`Keys.make(dir)` issues a CA with party0/party1 TLS and signing certificates; `statement()`
is shaped like a job's statement (`server.evidence.statement`); `sign_as` builds one
signature entry with any key and certificate, so tests can mix a right certificate with
a wrong key and so on.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization

from mpc.plane.certificate_authority import make_certs
from proto.certificate import FORMAT, sign, signing_payload, utc_iso


def signed_at() -> float:
    """A signing time a minute ago: inside the validity of certificates issued before it
    (they start 5 minutes before issue), however long ago the test session started."""
    return time.time() - 60


@dataclass
class Keys:
    root: Path

    @classmethod
    def make(cls, root: Path) -> Keys:
        make_certs(root)
        return cls(root)

    @property
    def ca(self) -> Path:
        return self.root / "ca.pem"

    def pem(self, name: str) -> str:
        return (self.root / f"{name}.pem").read_text()

    def key(self, name: str):
        return serialization.load_pem_private_key((self.root / f"{name}.key").read_bytes(), password=None)


def statement(job_id: str = "j0123456789ab") -> dict:
    receipt = {
        "party": 0,
        "client": "c2",
        "rounds": [1, 2, 3],
        "files_deleted": 3,
        "bytes_deleted": 1536,
        "rows_deleted": 3,
        "erased_at": utc_iso(signed_at() - 5),
        "content_sha256": ["a" * 64, "b" * 64, "c" * 64],
    }
    return {
        "job": {"id": job_id, "strategy": "starfish", "parameters": {"sigma": 0.6, "B": 2}, "targets": ["c2"]},
        "models": {
            "architecture": "logreg",
            "hash_scheme": "sha256(...)",
            "replaced": {"global_round": 3, "hash": "1" * 64},
            "unlearned": {"global_round": 4, "hash": "2" * 64},
        },
        "history": {"stored_rounds": 3, "selected_rounds": [1, 3], "selection_method": "secrs"},
        "erasure": {
            "c2": {
                "member_rounds": [1, 2, 3],
                "receipts": {"party0": receipt, "party1": {**receipt, "party": 1, "files_deleted": 2}},
            }
        },
        "revealed": {"selected_rounds": {"count": 2, "values": [1, 3], "why": "top-T' payload of SecRS"}},
    }


def sign_as(signer: str, st: dict, key, cert_pem: str, when: float | None = None) -> dict:
    stamp = utc_iso(signed_at() if when is None else when)
    algorithm, signature = sign(key, signing_payload(st, signer, stamp))
    return {
        "signer": signer,
        "signed_at": stamp,
        "algorithm": algorithm,
        "signature": signature,
        "certificate": cert_pem,
    }


def certificate(keys: Keys, st: dict | None = None) -> dict:
    """A correctly signed certificate of `st` (default `statement()`)."""
    st = st or statement()
    entries = [sign_as(p, st, keys.key(f"{p}-signing"), keys.pem(f"{p}-signing")) for p in ("party0", "party1")]
    return {"format": FORMAT, "statement": st, "signatures": entries}
