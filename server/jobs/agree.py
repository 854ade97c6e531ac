"""Small public agreements between the two job workers over their open CrypTen session.

Used where both parties must take the same decision from local observations: the task
deadline (party0's clock), who answered a task (a client counts only if BOTH parties hold
its answer: a public bitmask, AND-ed), the checkpoint to resume from (the newest one both
parties hold) and equality checks of public digests. Every value exchanged here is public.
"""

from __future__ import annotations

from typing import Sequence

import torch

from mpc.onnx_shim import load_crypten


class DisagreementError(RuntimeError):
    """The two parties hold different public values where they must be equal."""


def gather(values: Sequence[int]) -> list[list[int]]:
    """All-gather a list of int64 values; returns [party0's values, party1's values]."""
    load_crypten()
    import crypten.communicator as comm

    tensors = comm.get().all_gather(torch.tensor(list(values), dtype=torch.long))
    return [t.tolist() for t in tensors]


def leader_value(value: int) -> int:
    """Party0's value, known to both parties afterwards."""
    return gather([value])[0][0]


def minimum(value: int) -> int:
    return min(v[0] for v in gather([value]))


def both_true(bits: Sequence[bool]) -> list[bool]:
    """Element-wise AND of the two parties' bitmasks."""
    mine, theirs = gather([int(b) for b in bits])
    return [bool(a and b) for a, b in zip(mine, theirs)]


def check_same(hex_digest: str, what: str) -> None:
    """Raise `DisagreementError` unless the other party holds the same digest."""
    head = int.from_bytes(bytes.fromhex(hex_digest)[:8], "little", signed=True)
    values = gather([head])
    if values[0][0] != values[1][0]:
        raise DisagreementError(f"the parties hold different {what}")
