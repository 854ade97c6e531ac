"""Small public agreements between the two job workers over their open CrypTen session.

Used where both parties must take the same decision from local observations: the task
deadline (party0's clock), who answered a task (a client counts only if BOTH parties hold
its answer: a public bitmask, AND-ed), the checkpoint to resume from (the newest one both
parties hold) and equality checks of public digests. Every value exchanged here is public
and travels through the backend's `all_gather`.
"""

from __future__ import annotations

from collections.abc import Sequence

from mpc.backend import Backend


class DisagreementError(RuntimeError):
    """The two parties hold different public values where they must be equal."""


def leader_value(backend: Backend, value: int) -> int:
    """Party0's value, known to both parties afterwards."""
    return backend.all_gather([value])[0][0]


def minimum(backend: Backend, value: int) -> int:
    """The smaller of the two parties' values."""
    return min(v[0] for v in backend.all_gather([value]))


def both_true(backend: Backend, bits: Sequence[bool]) -> list[bool]:
    """Element-wise AND of the two parties' bitmasks."""
    mine, theirs = backend.all_gather([int(b) for b in bits])
    return [bool(a and b) for a, b in zip(mine, theirs, strict=True)]


def check_same(backend: Backend, hex_digest: str, what: str) -> None:
    """Raise `DisagreementError` unless the other party holds the same digest."""
    head = int.from_bytes(bytes.fromhex(hex_digest)[:8], "little", signed=True)
    values = backend.all_gather([head])
    if values[0][0] != values[1][0]:
        raise DisagreementError(f"the parties hold different {what}")
