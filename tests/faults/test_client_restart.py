"""A client process killed (SIGKILL) and started again, at the points where it used to go wrong.

1. Killed between its two acknowledgements (party0 acknowledged, party1 was down): the outbox
   holds the sharing (mode 0600), the restarted process resends the same second half, and the
   round counts the client with its true gradient.
2. Killed after both acknowledgements, restarted after the round committed: `submit` for that
   round returns the earlier receipt and the status "counted" (no conflict, no guess).
3. Killed between its acknowledgements, and the round closes before it comes back: the
   restarted process gets RoundClosedError naming the reason, and forgets the sharing.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from client_sdk import RoundClosedError

from helpers.fault_helpers import check_acked_counted, check_models, deployment, gradient, samples
from helpers.stage1_helpers import wait_committed

pytestmark = pytest.mark.timeout(300)
HERE = Path(__file__).resolve().parent
M = 512
CLIENTS = ["victim", "p1", "p2", "p3"]


class ClientProcess:
    """client_process.py for one (client, round): started, then told to go, killed or awaited."""

    def __init__(self, dep, client: str, round_index: int):
        # the checkout first (its packages, not the test folders of the same names), then tests/
        # for the helpers package
        env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(HERE.parents[1]), str(HERE.parent)))}
        self.log = open(dep.root / "logs" / f"{client}-r{round_index}.log", "ab")
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "client_process.py"), str(dep.root), client, str(round_index), str(M)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            env=env,
        )
        assert self.proc.stdout.readline().strip() == "ready", "client process did not start"

    def go(self) -> None:
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def result(self, timeout_s: float = 120.0) -> dict:
        out, _ = self.proc.communicate(timeout=timeout_s)
        self.log.close()
        return json.loads(out.strip().splitlines()[-1])

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.log.close()


def _record(dep, client: str, round_index: int) -> Path:
    return dep.root / "outbox" / client / f"round-{round_index:08d}.json"


def _wait_acked(dep, client: str, round_index: int, acked: list[bool], timeout_s: float = 60.0) -> None:
    end = time.time() + timeout_s
    path = _record(dep, client, round_index)
    while time.time() < end:
        if path.exists() and json.loads(path.read_text())["acked"] == acked:
            return
        time.sleep(0.05)
    raise TimeoutError(f"{client}'s outbox never showed acknowledgements {acked}")


def _kill_between_acks(dep, client: str, round_index: int) -> None:
    """party1 down, the client process uploads, party0 acknowledges, the process is killed."""
    proc = ClientProcess(dep, client, round_index)
    dep.kill(1)
    proc.go()
    _wait_acked(dep, client, round_index, [True, False])
    proc.kill()
    shares = _record(dep, client, round_index).with_suffix(".shares")
    assert stat.S_IMODE(shares.stat().st_mode) == 0o600 and stat.S_IMODE(shares.parent.stat().st_mode) == 0o700
    dep.start(1)


def _submit_others(dep, round_index: int) -> dict:
    receipts = {}
    for c in CLIENTS[1:]:
        with dep.client(c) as sdk:
            sdk.wait_for_round(round_index - 1, timeout_s=90)
            receipts[(round_index, c)] = sdk.submit(round_index, gradient(c, round_index, M), samples(c))
    return receipts


def _register(dep) -> None:
    for c in CLIENTS:
        with dep.client(c) as sdk:
            sdk.register()


def test_client_killed_between_or_after_its_acknowledgements_counts_once(tmp_path):
    dep = deployment(tmp_path / "dep", CLIENTS, M, deadline_s=120.0)
    try:
        _register(dep)
        _kill_between_acks(dep, "victim", 1)
        again = ClientProcess(dep, "victim", 1)
        again.go()
        resumed = again.result()
        assert resumed["resumed"] and resumed["outcome"] in ("pending", "counted"), resumed
        receipts = {(1, "victim"): SimpleNamespace(**resumed), **_submit_others(dep, 1)}
        wait_committed(dep, 1)
        assert not _record(dep, "victim", 1).with_suffix(".shares").exists()  # compacted after both acks
        # round 2: the process ends normally after both acknowledgements; the restarted one asks
        first = ClientProcess(dep, "victim", 2)
        first.go()
        done = first.result()
        assert not done["resumed"] and done["outcome"] == "pending"
        assert not _record(dep, "victim", 1).exists()  # round 1 counted: forgotten by the next submit
        receipts.update({(2, "victim"): SimpleNamespace(**done), **_submit_others(dep, 2)})
        wait_committed(dep, 2)
        restarted = ClientProcess(dep, "victim", 2)
        restarted.go()
        told = restarted.result()
        assert told["resumed"] and told["outcome"] == "counted" and told["binding_sha256"] == done["binding_sha256"]
        check_acked_counted(dep, receipts)
        assert check_models(dep, M)[:2] == [1, 2]
        with dep.client("victim") as sdk:  # both outcomes are final: the outbox forgets them
            assert list(sdk.resume_pending()) == ["round:2"] and sdk.pending_uploads() == []
    finally:
        dep.stop()


def test_round_closed_before_the_restart_is_reported_clearly(tmp_path):
    dep = deployment(tmp_path / "dep", CLIENTS, M, deadline_s=3.0)
    try:
        _register(dep)
        _kill_between_acks(dep, "victim", 1)
        for c in CLIENTS[1:]:
            with dep.client(c) as sdk:
                sdk.submit(1, gradient(c, 1, M), samples(c))
        status = wait_committed(dep, 1)  # closes at the deadline with the others only
        assert {m.client_id for m in status.rounds[0].members} == set(CLIENTS[1:])
        restarted = ClientProcess(dep, "victim", 1)
        restarted.go()
        told = restarted.result()
        assert told["outcome"] == "excluded" and "only party0 holds an upload" in told["error"], told
        assert not _record(dep, "victim", 1).exists()
        with dep.client("victim") as sdk:
            assert sdk.upload_status(1).outcome == "excluded"
            with pytest.raises(RoundClosedError, match="round 1 closed without this client's upload"):
                sdk.submit(1, gradient("victim", 1, M), samples("victim"), status.rounds[0].model_hash)
    finally:
        dep.stop()
