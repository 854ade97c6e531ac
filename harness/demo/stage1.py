"""Stage I through the service (docs/SERVICE.md, "Round protocol"): the admin installs M_0, the simulated clients
train T rounds against the two parties, and the demo reads back the public models.

Per round the demo records what the parties report (members, peer bytes of the aggregate
exchange, open/commit times) and what the clients sent (share bytes to both parties).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from harness.demo.fleet import Fleet
from harness.demo.processes import DemoServices

Say = Callable[[str], None]
#: how often the demo polls the training status
STATUS_POLL_S = 0.2


@dataclass
class RoundStats:
    round: int
    members: int
    seconds: float  #: party0 opened the round → the demo saw it committed (±STATUS_POLL_S)
    client_bytes: int  #: share bytes uploaded by all clients to both parties
    peer_bytes: int  #: aggregate-share bytes exchanged between the parties


@dataclass
class StageOne:
    """The trained history's public side, as the parties committed it."""

    models: list[torch.Tensor]  #: M_0..M_T (flat float32, fetched from both parties)
    model_hashes: list[str]
    rounds: list[RoundStats] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def client_bytes(self) -> int:
        return sum(r.client_bytes for r in self.rounds)

    @property
    def peer_bytes(self) -> int:
        return sum(r.peer_bytes for r in self.rounds)


def train(services: DemoServices, fleet: Fleet, m0: torch.Tensor, rounds: int, say: Say, timeout_s: float) -> StageOne:
    """Run T rounds of Stage I; returns M_0..M_T as both parties serve them."""
    cfg = fleet.federation.config
    start = time.perf_counter()
    uploaded: dict[int, int] = {}
    lock = threading.Lock()

    def on_upload(_client: str, round_index: int, nbytes: int) -> None:
        with lock:
            uploaded[round_index] = uploaded.get(round_index, 0) + nbytes

    fleet.register()
    admin = services.deployment.admin()
    try:
        admin.start_training(cfg.architecture, m0.numpy(), cfg.lr)
        errors: list[BaseException] = []

        def run_clients() -> None:
            try:
                fleet.train(rounds, on_upload, timeout_s)
            except BaseException as exc:
                errors.append(exc)

        worker = threading.Thread(target=run_clients, name="stage1-clients", daemon=True)
        worker.start()
        committed_at = _follow_rounds(admin, services, fleet, rounds, say, timeout_s, errors)
        worker.join(timeout_s)
        if errors:
            raise RuntimeError(str(errors[0]))
        status = admin.status()
    finally:
        admin.close()
    seconds = time.perf_counter() - start
    sdk = fleet.clients[0].sdk
    fetched = [sdk.fetch_model(i) for i in range(rounds + 1)]
    stats = []
    for r in status.rounds:
        if 1 <= r.round <= rounds:
            took = committed_at.get(r.round, r.opened_unix) - r.opened_unix
            stats.append(RoundStats(r.round, len(r.members), took, uploaded.get(r.round, 0), int(r.peer_bytes)))
    models = [torch.from_numpy(np.asarray(m.params, dtype=np.float32).copy()) for m in fetched]
    return StageOne(models, [m.hash for m in fetched], stats, seconds)


def _follow_rounds(
    admin, services: DemoServices, fleet: Fleet, rounds: int, say: Say, timeout_s: float, errors: list
) -> dict[int, float]:
    """Report each committed round until T are; fail at once when a client, a party or the
    clock gives out. Returns when each round was seen committed (unix time)."""
    start = time.perf_counter()
    committed_at: dict[int, float] = {}
    while True:
        status = admin.status()
        if status.error:
            raise RuntimeError(f"training halted on the parties: {status.error}")
        for r in status.rounds:
            if r.state == "committed" and r.round not in committed_at:
                committed_at[r.round] = time.time()
                say(
                    f"  round {r.round:>2}/{rounds} committed: {len(r.members)} clients, "
                    f"model {r.model_hash[:12]}, {time.perf_counter() - start:6.1f} s"
                )
        if status.latest_committed >= rounds:
            return committed_at
        if errors:
            raise RuntimeError(str(errors[0]))
        if fleet.failures():  # a round waits for every client: fail now rather than at the deadline
            raise RuntimeError("client(s) failed during training: " + "; ".join(fleet.failures()))
        services.check_alive()
        if time.perf_counter() - start > timeout_s:
            raise TimeoutError(f"Stage I did not finish {rounds} rounds within {timeout_s:.0f} s")
        time.sleep(STATUS_POLL_S)
