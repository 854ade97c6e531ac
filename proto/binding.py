"""Binding of the two halves of one sharing (the `ShareBinding` of the wire contract).

A client splits (g, ‖g‖, δ) into two halves, one per party. So that the parties can check,
before the client joins an aggregate, that they hold two halves of the *same* sharing, the
client draws a sharing id (16 random bytes) and one nonce per party (32 bytes each) and
commits to each half:

    c_p = sha256(TAG ‖ nonce_p ‖ sharing_id ‖ p ‖ target ‖ n_j ‖ model hash ‖ m ‖
                 content_sha256_p ‖ [‖g‖]_p ‖ [δ]_p)        (each field length-prefixed)

where content_sha256_p is the sha256 of party p's gradient share bytes, or of its 32-byte
mask seed when the share is seed-compressed. Party p receives the sharing id, both
commitments and nonce_p only: c_{1−p} is a hiding commitment to the other half (its nonce
never reaches party p), so it tells party p nothing about the other share. Party p
recomputes c_p from the half it received and stores

    binding = sha256(TAG ‖ sharing_id ‖ c_0 ‖ c_1).

Equal bindings on the two parties mean that party0 holds the half the client committed to
as c_0 and party1 the half committed to as c_1 in the same sharing; a half of another
sharing (a fresh sharing sent on a retry) gives a different binding.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

TAG = b"starfish-binding-v1\x00"
SHARING_ID_BYTES = 16
NONCE_BYTES = 32
COMMITMENT_BYTES = 32


class BindingError(ValueError):
    """A half does not match the binding it carries, or the binding is malformed."""


@dataclass(frozen=True)
class HalfFacts:
    """What party p's commitment covers: the target, the public facts and its half."""

    party: int
    target: str  #: "round:<i>" or "task:<task id>"
    n_samples: int
    model_hash: str
    num_params: int
    content_sha256: str  #: hex sha256 of the gradient share bytes, or of the mask seed
    norm_share: bytes  #: 8 bytes, little-endian int64
    delta_share: bytes  #: 8 bytes, little-endian int64


def round_target(round_index: int) -> str:
    return f"round:{int(round_index)}"


def task_target(task_id: str) -> str:
    return f"task:{task_id}"


def new_sharing_id() -> bytes:
    return os.urandom(SHARING_ID_BYTES)


def new_nonce() -> bytes:
    return os.urandom(NONCE_BYTES)


def _field(data: bytes) -> bytes:
    return len(data).to_bytes(4, "little") + data


def commitment(nonce: bytes, sharing_id: bytes, half: HalfFacts) -> bytes:
    """c_p = sha256(TAG ‖ nonce_p ‖ sharing_id ‖ p ‖ target ‖ n_j ‖ model hash ‖ m ‖ digest ‖ norm ‖ δ)."""
    h = hashlib.sha256(TAG)
    for part in (
        nonce,
        sharing_id,
        bytes([half.party]),
        half.target.encode("utf-8"),
        int(half.n_samples).to_bytes(8, "little"),
        half.model_hash.encode("ascii"),
        int(half.num_params).to_bytes(8, "little"),
        half.content_sha256.encode("ascii"),
        half.norm_share,
        half.delta_share,
    ):
        h.update(_field(part))
    return h.digest()


def binding_digest(sharing_id: bytes, commitments: tuple[bytes, bytes] | list[bytes]) -> str:
    """binding = sha256(TAG ‖ sharing_id ‖ c_0 ‖ c_1), hex: equal on both parties for a consistent pair."""
    h = hashlib.sha256(TAG)
    for part in (sharing_id, *commitments):
        h.update(_field(bytes(part)))
    return h.hexdigest()


def verify(sharing_id: bytes, commitments: list[bytes], nonce: bytes, half: HalfFacts) -> str:
    """Party p's check of the half it received; returns the binding digest or raises BindingError."""
    if len(sharing_id) != SHARING_ID_BYTES:
        raise BindingError(f"sharing id must be {SHARING_ID_BYTES} bytes, got {len(sharing_id)}")
    if len(commitments) != 2 or any(len(c) != COMMITMENT_BYTES for c in commitments):
        raise BindingError(f"a binding carries two {COMMITMENT_BYTES}-byte commitments")
    if len(nonce) != NONCE_BYTES:
        raise BindingError(f"binding nonce must be {NONCE_BYTES} bytes, got {len(nonce)}")
    if commitment(nonce, sharing_id, half) != commitments[half.party]:
        raise BindingError(f"the half sent to party{half.party} does not match its commitment in the binding")
    return binding_digest(sharing_id, commitments)
