"""A two-party cluster whose owner dies must not leave its processes behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

OWNER = """
import json, os, sys
from mpc.cluster import TwoPartyCluster, ClusterConfig
cluster = TwoPartyCluster(timeout=120, config=ClusterConfig(session_timeout_s=20)).start()
print(json.dumps(cluster.pids), flush=True)
os._exit(0)  # die without closing the cluster
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie awaiting reaping by init counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.timeout(240)
def test_cluster_processes_exit_when_their_owner_dies() -> None:
    out = subprocess.run([sys.executable, "-c", OWNER], cwd=REPO, capture_output=True, text=True, timeout=200)
    assert out.returncode == 0, out.stderr
    pids = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(pids) >= {"party0", "party1"}, pids
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(_alive(p) for p in pids.values()):
        time.sleep(0.5)
    survivors = {name: pid for name, pid in pids.items() if _alive(pid)}
    for pid in survivors.values():
        os.kill(pid, 9)
    assert not survivors, f"processes outlived their owner: {survivors}"
