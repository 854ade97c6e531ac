"""`starfish up`: dealer, party0 and party1 start as separate processes and all stop on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from harness.local import LocalDeployment

pytestmark = pytest.mark.timeout(300)


def _children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True)
    return [int(x) for x in out.stdout.split()]


def test_up_starts_everything_and_stops_cleanly(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "starfish_cli", "up", "--dir", str(tmp_path / "run"), "--clients", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        lines = []
        while not any("Ctrl-C stops everything" in ln for ln in lines):
            line = proc.stdout.readline()
            assert line, "".join(lines)
            lines.append(line)
        children = _children(proc.pid)
        assert len(children) == 3, lines  # dealer, party0, party1
        dep = LocalDeployment(tmp_path / "run")
        for role in (0, 1):
            dep.wait_healthy(role, timeout_s=10)
        with dep.client("client0") as c:
            c.register()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        assert "stopped" in proc.stdout.read()
        time.sleep(0.2)
        alive = [
            pid
            for pid in children
            if os.path.exists(f"/proc/{pid}") and "Z" not in open(f"/proc/{pid}/stat").read().split()[2]
        ]
        assert alive == []
    finally:
        if proc.poll() is None:
            proc.kill()
