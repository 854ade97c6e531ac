"""`starfish dealer`: refuses bad settings, and gives up when no party shows up."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mpc.cluster import free_port
from starfish.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _dealer(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "starfish.cli", "dealer", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_remote_host_refused_without_flag(capsys):
    assert main(["dealer", "--host", "192.0.2.7", "--port", "29999"]) == 2
    assert "loopback" in capsys.readouterr().err


def test_negative_session_count_refused(capsys):
    assert main(["dealer", "--port", "29999", "--sessions", "-1"]) == 2
    assert "--sessions" in capsys.readouterr().err


@pytest.mark.timeout(180)
def test_dealer_without_parties_gives_up_after_its_timeout():
    # a separate process: the dealer initialises CrypTen's process-global communicator
    out = _dealer("--port", str(free_port()), "--sessions", "1", "--timeout", "3")
    assert out.returncode == 1
    assert "failed" in out.stderr
