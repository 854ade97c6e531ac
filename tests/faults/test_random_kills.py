"""Seeded random faults: in every round of a trial, party0 or party1 is killed (SIGKILL) at a
random moment while 12 SDK clients are uploading, stays down 0.5–9 s, and is restarted.

After each trial: every acknowledged upload is stored on both parties and counted; every round
counts all 12 clients; every committed model equals plaintext FedAvg of its members. The number
of trials is `STARFISH_FAULT_TRIALS` (2 by default; trial k uses seed 1000 + k).
"""

from __future__ import annotations

import os
import random
import threading
import time

import pytest

from helpers.fault_helpers import ClientThreads, check_acked_counted, check_models, deployment
from helpers.stage1_helpers import wait_committed

TRIALS = int(os.environ.get("STARFISH_FAULT_TRIALS", "2"))
pytestmark = pytest.mark.timeout(150 + 60 * TRIALS)
M = 1_000
ROUNDS = 3
CLIENTS = [f"c{i:02d}" for i in range(12)]


def _chaos(dep, rng: random.Random, started: dict, log: list) -> None:
    """Per round: once some client began it, wait 0–1.5 s, kill a random party, restart it later."""
    for r in range(1, ROUNDS + 1):
        started[r].wait(120)
        victim, delay, outage = rng.choice((0, 1)), rng.uniform(0.0, 1.5), rng.uniform(0.5, 9.0)
        time.sleep(delay)
        dep.kill(victim)
        time.sleep(outage)
        dep.start(victim)
        log.append((r, victim, round(delay, 2), round(outage, 2)))


@pytest.mark.parametrize("trial", range(TRIALS))
def test_random_party_kills_lose_and_corrupt_nothing(tmp_path, trial):
    rng = random.Random(1000 + trial)
    dep = deployment(tmp_path / "dep", CLIENTS, M, deadline_s=120.0, max_rounds=ROUNDS)
    try:
        clients = ClientThreads(dep, CLIENTS, ROUNDS, M)
        faults: list = []
        chaos = threading.Thread(target=_chaos, args=(dep, rng, clients.started, faults), daemon=True)
        clients.start()
        chaos.start()
        clients.join(120 * ROUNDS)
        chaos.join(60)
        assert not clients.errors, (faults, clients.errors)
        status = wait_committed(dep, ROUNDS, timeout_s=120)
        assert [len(r.members) for r in status.rounds] == [len(CLIENTS)] * ROUNDS, faults
        assert len(clients.receipts) == len(CLIENTS) * ROUNDS
        check_acked_counted(dep, clients.receipts)
        assert check_models(dep, M) == list(range(1, ROUNDS + 1)), faults
    finally:
        dep.stop()
