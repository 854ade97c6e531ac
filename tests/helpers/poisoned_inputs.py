"""Malicious clients' inputs, made by hand: a correctly bound share pair (proto.binding) of
values no honest client sends, built without the SDK's encoder so none of its checks runs."""

from __future__ import annotations

import secrets

import numpy as np

from client_sdk import Client
from client_sdk.sharing import Half, Sharing, assemble
from mpc.fixedpoint import to_wire
from proto import binding

from helpers.stage1_helpers import F


def ring(values: np.ndarray) -> np.ndarray:
    """round(v·2^f) as ring elements, without the encoder's range check."""
    return np.array([int(round(float(v) * 2**F)) for v in np.asarray(values).reshape(-1)], dtype=np.int64)


def poisoned_sharing(target: str, model_hash: str, n_samples: int, g: np.ndarray, norm: float, delta: float) -> Sharing:
    """Both halves of (g, ‖g‖ = `norm`, δ = `delta`) under fresh CSPRNG masks, bound together."""
    values = (ring(g), ring(np.array([norm])), ring(np.array([delta])))
    masks = [np.frombuffer(secrets.token_bytes(8 * v.size), dtype="<i8").astype(np.int64) for v in values]
    with np.errstate(over="ignore"):
        firsts = [v - r for v, r in zip(values, masks, strict=True)]
    halves = [
        Half(to_wire(shares[0]), b"", to_wire(shares[1]), to_wire(shares[2]), binding.new_nonce())
        for shares in (firsts, masks)
    ]
    return assemble(target, n_samples, model_hash, (halves[0], halves[1]), np.asarray(g, dtype=np.float64))


class PoisoningClient(Client):
    """An SDK client that answers every task with 2^30 in every coordinate (its round uploads
    stay honest): without the input check, each session attempt of a job fails on it."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.poisoned: list[str] = []  #: the task targets answered with poison

    def _make_and_send(self, target, gradient, n_samples, model_hash, encoding, deadline):
        if not target.startswith("task:"):
            return super()._make_and_send(target, gradient, n_samples, model_hash, encoding, deadline)
        self.poisoned.append(target)
        g = np.full(np.asarray(gradient).size, 2.0**30)
        sharing = poisoned_sharing(target, model_hash, n_samples, g, float(np.linalg.norm(g)), 0.0)
        return self._send_entry(self.outbox.save(sharing, deadline), resumed=False)
