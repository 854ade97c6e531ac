"""`RoundDriver`: the Flower server's side of the Starfish round protocol, over party0's
admin API (`client_sdk.admin.AdminClient`; party0 runs with ``[rounds] opening =
"on_request"``).

* `install`: M_0 = the app's initial arrays (once; a restarted app continues from the
  parties' newest model instead);
* `open`: open round i = T + 1 on both parties and fetch M_{i−1} (hash-checked);
* `commit`: close round i once the clients that acknowledged their uploads are on both
  parties, wait for the commit and fetch M_i (hash-checked against the round's output).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from flwr.app import ArrayRecord

from client_sdk.admin import AdminClient
from client_sdk.errors import StarfishError
from proto.starfish.v1 import common_pb2
from starfish_flower import logs
from starfish_flower.arrays import flatten, unflatten

log = logs.get(__name__)


@dataclass(frozen=True)
class GlobalModel:
    """A committed public model M_i as the Flower server holds it."""

    round: int
    arrays: ArrayRecord
    hash: str
    lr: float
    arch: str


@dataclass(frozen=True)
class CommittedRound:
    round: int
    model_hash: str
    members: dict[str, int]  #: agreed membership S with FedAvg weights n_j (public)
    seconds: float  #: from the open request to the commit
    upload_bytes: int = 0  #: payload the clients sent to the parties (their receipts)
    client_sdk_s: float = 0.0  #: wall time the clients spent in the SDK, summed


class RoundDriver:
    def __init__(self, admin: AdminClient, template: ArrayRecord, round_timeout_s: float):
        self.admin = admin
        self.template = template
        self.round_timeout_s = round_timeout_s
        self.latest: GlobalModel | None = None
        self.opened_at: dict[int, float] = {}

    def install(self, arch: str, initial: ArrayRecord, lr: float) -> GlobalModel:
        """Install M_0 unless training already started; returns the newest committed model."""
        if self.admin.status().phase == common_pb2.ROUND_PHASE_NOT_STARTED:
            self.admin.start_training(arch, flatten(initial), lr)
            log.info("Starfish: initial model installed (%s, η = %g)", arch, lr)
        return self.refresh()

    def refresh(self) -> GlobalModel:
        """Fetch the newest committed model (after an unlearning job it is the unlearned one)."""
        header, flat = self.admin.global_model(None)
        self.latest = self._model(header, flat)
        return self.latest

    def _model(self, header, flat: np.ndarray) -> GlobalModel:
        return GlobalModel(int(header.round), unflatten(flat, self.template), header.model_hash, header.lr, header.arch)

    def open(self) -> GlobalModel:
        """Open round i = T + 1 on both parties; returns M_{i−1} (= M_T)."""
        assert self.latest is not None, "install() first"
        ticket = self.admin.open_round(self.latest.round + 1)
        if ticket.state != "open":  # e.g. an unlearning job installed a newer model meanwhile
            self.refresh()
            ticket = self.admin.open_round(self.latest.round + 1)
        i = ticket.round
        self.opened_at.setdefault(i, time.time())
        if ticket.state != "open":
            raise StarfishError(f"Starfish round {i} did not open ({ticket.state}): {ticket.error}")
        if ticket.model_in_hash != self.latest.hash:
            raise StarfishError(
                f"round {i} opens from {ticket.model_in_hash[:12]}, "
                f"the newest committed model is {self.latest.hash[:12]}"
            )
        return self.latest

    def commit(self, clients: list[str]) -> CommittedRound:
        """Close the open round once `clients` are on both parties; wait for the commit; fetch M_i."""
        assert self.latest is not None, "install() first"
        i = self.latest.round + 1
        ticket = self.admin.close_round(i, clients, wait_s=self.round_timeout_s)
        if ticket.state != "committed":
            raise StarfishError(f"Starfish round {i} did not commit ({ticket.state}): {ticket.error}")
        header, flat = self.admin.global_model(i)
        if header.model_hash != ticket.model_out_hash:
            raise StarfishError(f"party0 serves {header.model_hash[:12]} as M_{i}, the round committed another model")
        self.latest = self._model(header, flat)
        members = {m.client_id: int(m.n_samples) for m in ticket.members}
        return CommittedRound(i, header.model_hash, members, time.time() - self.opened_at.pop(i, time.time()))
