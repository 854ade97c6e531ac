"""The deployment the fuzz modules share the helpers of (conftest.py starts one per module):
the dealer, party0 and party1 as processes on loopback (free ports, TLS), an initial model
installed and one round trained by SDK clients.

Clients c0–c2 train; `fz` is the fuzzers' own client credential (never a job target with a
history, never erased by a trainer's name). After a module's fuzzing, its last test checks
the invariants that outlive single calls: no party or dealer process exited, no traceback
in any log, and the deployment still trains a round.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np

from harness.local import LocalDeployment

from helpers.fuzz_messages import Hints

TRAINERS = ["c0", "c1", "c2"]
FUZZ_CLIENT = "fz"
DIM = 8
ROUND_WAIT_S = 120.0
#: strings a fuzzed request may carry besides random text: names the service knows (no trainer:
#: a trusted call naming one could legitimately erase it) and awkward ones
HINTS = Hints(
    names=(FUZZ_CLIENT, "", "party0", "party1", "dealer", "starfish", "random", "j000000000000", "../../etc", "x" * 300)
)


def train_round(dep: LocalDeployment) -> int:
    """The trainers upload to the next round; returns the latest committed round once it grew."""
    with dep.admin() as admin:
        before = admin.status().latest_committed
    errors: list[BaseException] = []

    def upload(cid: str, seed: int) -> None:
        rng = np.random.default_rng(seed)  # test data only
        try:
            with dep.client(cid) as client:
                client.register()
                client.run_round(
                    lambda p: (0.01 * rng.standard_normal(p.size), 10), after=before, timeout_s=ROUND_WAIT_S
                )
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=upload, args=(c, k)) for k, c in enumerate(TRAINERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(ROUND_WAIT_S + 30)
    assert not errors, errors
    with dep.admin() as admin:
        status = admin.status()
        if status.open_round and status.latest_committed <= before:  # no need to wait for fz until the deadline
            admin.close_round(status.open_round, TRAINERS)
        end = time.time() + ROUND_WAIT_S
        while (latest := admin.status().latest_committed) <= before and time.time() < end:
            time.sleep(0.1)
    return latest


def logs_with_tracebacks(dep: LocalDeployment) -> dict[str, str]:
    """The lines around each 'Traceback' in the parties' and the dealer's logs."""
    found = {}
    for path in sorted(Path(dep.root, "logs").glob("*.log")):
        text = path.read_text(errors="replace")
        at = text.find("Traceback")
        if at >= 0:
            found[path.name] = text[max(0, at - 300) : at + 3000]
    return found


def assert_survived(dep: LocalDeployment) -> None:
    """Every process runs, no log holds a traceback, and a round still trains."""
    exited = {f"party{r}": p.returncode for r, p in dep.procs.items() if p.poll() is not None}
    if dep.dealer_proc is not None and dep.dealer_proc.poll() is not None:
        exited["dealer"] = dep.dealer_proc.returncode
    assert not exited, exited
    assert not logs_with_tracebacks(dep), "\n".join(logs_with_tracebacks(dep).values())
    with dep.admin() as admin:
        before = admin.status().latest_committed
    assert train_round(dep) > before
    assert not logs_with_tracebacks(dep), "\n".join(logs_with_tracebacks(dep).values())
