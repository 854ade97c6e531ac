"""A full disk (a small tmpfs filled by a ballast file) or a read-only store (a read-only bind mount
over `shares/` or `models/`) on one party, while clients upload or while the round commits.

Each case: 5 clients, rounds opened and closed by the admin (`opening = "on_request"`), so the
fault is in place exactly at the upload or at the commit. At the commit a full disk keeps 64 KiB
free: the admin's close request (a few SQLite pages) is recorded, the round's model (80 KB) is
not, so the fault is met by the commit itself, not by the admin call. While the fault lasts no
submit returns (the party answers RESOURCE_EXHAUSTED or UNAVAILABLE, the SDK retries), the round
does not commit and is not failed on either party; once the store is writable again the round
commits by itself, and so does the next one. The faulty party's own log names the fault (it met
it); invariants: every acknowledged upload is counted on both parties, every committed model
equals FedAvg of its members, no temp file is left.
By default each party and phase is covered once (alternating the fault); with
`STARFISH_FAULT_TRIALS` > 2 all eight combinations run.
"""

from __future__ import annotations

import contextlib
import os
import time

import pytest

from harness.local import LocalDeployment

from helpers.fault_helpers import (
    check_acked_counted,
    check_models,
    configure,
    receipts_of,
    start_training,
    submit_threads,
)
from helpers.stage1_helpers import wait_committed
from helpers.storage_helpers import disk_full, read_only, require_root, tmpfs

pytestmark = pytest.mark.timeout(300)
M = 20_000
CLIENTS = [f"c{i}" for i in range(5)]
HOLD_S = 4.0  #: how long the fault lasts at least
MEET_S = 90.0  #: the fault is held until the party has met it (an upload check may come first), at most this long
COMMIT_ROOM = 64 << 10  #: bytes a full disk keeps at the commit: a close request fits, a model (4·M bytes) does not
ALL = [(v, phase, kind) for v in (0, 1) for phase in ("upload", "commit") for kind in ("full", "read-only")]
DEFAULT = [(1, "commit", "full"), (0, "upload", "full"), (0, "commit", "read-only"), (1, "upload", "read-only")]
CASES = ALL if int(os.environ.get("STARFISH_FAULT_TRIALS", "2")) > 2 else DEFAULT


def _fault(dep: LocalDeployment, victim: int, phase: str, kind: str):
    if kind == "full":
        return disk_full(dep.data_dir(victim), leave=COMMIT_ROOM if phase == "commit" else 0)
    return read_only(dep.data_dir(victim) / ("shares" if phase == "upload" else "models"))


def _assert_waiting(dep: LocalDeployment, r: int) -> None:
    """Round r is neither committed nor failed (on party0's view of both parties)."""
    with dep.admin() as admin:
        status = admin.status()
    assert status.latest_committed < r, "the round committed while a party could not write"
    assert not status.error, f"training halted on a storage fault: {status.error}"
    states = {x.round: x.state for x in status.rounds}
    assert states.get(r) != "failed", states


def _hit(victim: int, phase: str) -> str:
    """The log line of the faulty party that shows it met the fault."""
    return "cannot write its store now" if victim == 1 or phase == "upload" else "round step postponed"


def _hold_until_met(dep: LocalDeployment, victim: int, phase: str) -> None:
    """Keep the fault for HOLD_S and until the victim's log shows it met it (the round's upload
    check runs before its commit step, so a fixed hold can end before the commit is tried)."""
    time.sleep(HOLD_S)
    log, hit = dep.root / "logs" / f"party{victim}.log", _hit(victim, phase)
    deadline = time.monotonic() + MEET_S
    while hit not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert hit in log.read_text(), f"party{victim} never met the fault"


def _round(dep, sdks: dict, r: int, fault, phase: str, receipts: dict, victim: int = 0) -> None:
    with dep.admin() as admin:
        admin.open_round(r)
    view = sdks[CLIENTS[0]].wait_for_round(r - 1, timeout_s=60)
    assert view.round == r
    in_upload = fault if phase == "upload" else contextlib.nullcontext()
    with in_upload:
        threads, results = submit_threads(sdks, CLIENTS, r, M, view.model_hash)
        if phase == "upload":
            _hold_until_met(dep, victim, phase)
            assert not results, f"a submit returned while a party could not store it: {results}"
            _assert_waiting(dep, r)
    receipts |= receipts_of(threads, results, CLIENTS, r)
    in_commit = fault if phase == "commit" else contextlib.nullcontext()
    with in_commit, dep.admin() as admin:
        admin.close_round(r, [])
        if phase == "commit":
            _hold_until_met(dep, victim, phase)
            _assert_waiting(dep, r)
    status = wait_committed(dep, r, timeout_s=90)
    assert {m.client_id for m in status.rounds[r - 1].members} == set(CLIENTS)


@pytest.mark.parametrize("victim, phase, kind", CASES)
def test_storage_fault_delays_the_round_and_loses_nothing(tmp_path, victim, phase, kind):
    require_root()
    dep = configure(tmp_path / "dep", CLIENTS, opening="on_request", deadline_s=300.0, limits={"min_free_bytes": 0})
    mounted = tmpfs(dep.data_dir(victim), 24) if kind == "full" else contextlib.nullcontext()
    with mounted:
        try:
            start_training(dep, M)
            sdks = {c: dep.client(c, compress_mask=False) for c in CLIENTS}  # both parties store share files
            for sdk in sdks.values():
                sdk.register()
            receipts: dict = {}
            _round(dep, sdks, 1, _fault(dep, victim, phase, kind), phase, receipts, victim)
            _round(dep, sdks, 2, contextlib.nullcontext(), "none", receipts)
            for sdk in sdks.values():
                sdk.close()
            check_acked_counted(dep, receipts)
            assert check_models(dep, M) == [1, 2]
            leftovers = list(dep.data_dir(victim).rglob(".tmp-*"))
            assert not leftovers, f"temp files left after failed writes: {leftovers[:3]}"
        finally:
            dep.stop()
