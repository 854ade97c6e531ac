"""What `StarfishFedAvg` checks before its first round, so a run that cannot work fails at
once with one message instead of abandoning rounds or waiting for a deadline.

* party0 must open rounds on request (``[rounds] opening = "on_request"``): with ``auto``
  it opens the next round itself after every commit and closes it only when every
  registered client uploaded, so the unlearning job that waits for that round would wait
  for its deadline;
* the federation must let FedAvg sample at least k = ``[privacy] min_cohort`` nodes per
  round: the parties abandon a round with fewer members (docs/PRIVACY.md). The strategy
  samples as FedAvg does, max(⌊N·fraction_train⌋, min_train_nodes) and at most N, among
  the N connected nodes that are not forgotten.
"""

from __future__ import annotations

import math
import time

from flwr.serverapp import Grid

from client_sdk.errors import StarfishError
from proto.starfish.v1 import admin_pb2
from starfish_flower import logs

log = logs.get(__name__)


def check_opening(status: admin_pb2.TrainingStatus) -> None:
    """Refuse a party0 that opens rounds by itself."""
    if status.opening and status.opening != "on_request":
        raise StarfishError(
            f'party0 opens training rounds by itself ([rounds] opening = "{status.opening}"); '
            'a Flower strategy chooses the clients of each round and needs opening = "on_request" '
            "(starfish up --opening on_request)"
        )


def wait_for_nodes(grid: Grid, wanted: int, timeout_s: float, poll_s: float = 1.0) -> int:
    """Wait until `wanted` Flower nodes are connected; the number connected."""
    end = time.time() + timeout_s
    logged = -1
    while (connected := len(list(grid.get_node_ids()))) < wanted:
        if time.time() >= end:
            raise StarfishError(
                f"waited {timeout_s:.0f} s for {wanted} Flower nodes (min_available_nodes); {connected} connected"
            )
        if connected != logged:
            log.info("Starfish: waiting up to %.0f s for %d Flower nodes; %d connected", timeout_s, wanted, connected)
            logged = connected
        time.sleep(poll_s)
    return connected


def sample_size(nodes: int, fraction_train: float, min_train_nodes: int) -> int:
    """How many nodes FedAvg samples for training out of `nodes` connected ones."""
    return max(int(nodes * fraction_train), min_train_nodes)


def check_cohort(nodes: int, fraction_train: float, min_train_nodes: int, forgotten: int, k: int) -> None:
    """Refuse sampling that gives a round fewer than k members (k = 0: the party did not say)."""
    eligible = nodes - forgotten  # `StarfishFedAvg.configure_train` samples among these
    per_round = min(sample_size(eligible, fraction_train, min_train_nodes), eligible)
    if k == 0 or per_round >= k:
        return
    needed = max(math.ceil(k / fraction_train), k) + forgotten if fraction_train > 0 else k + forgotten
    raise StarfishError(
        f"Flower samples {per_round} node(s) per round ({nodes} connected, fraction_train {fraction_train:g}, "
        f"min_train_nodes {min_train_nodes}, {forgotten} forgotten) but the parties commit a round only with "
        f"at least {k} members ([privacy] min_cohort): run at least {needed} SuperNodes (simulation: "
        f"--federation-config num-supernodes={needed}) or set min_train_nodes to at least {k + forgotten}"
    )
