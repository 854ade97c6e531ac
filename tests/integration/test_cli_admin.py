"""The `starfish` command line as an operator uses it, against a real `starfish up` (dealer,
party0 and party1 as processes on loopback):

* `--dir`, `--json` and the connection options stand before or after the admin subcommand;
* replies print as readable lines (dates in UTC, states in words, progress in percent), or
  with `--json` as data (integers as numbers, enum values as words);
* `admin jobs` lists the jobs, `admin cancel` cancels one; `starfish --version` answers;
* every error is one line on stderr and a non-zero exit, never a traceback: a missing model
  file, `certs --issue` without a CA, `up` on a directory that cannot be made, a second
  `up` on a running directory, an unknown job.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from harness.local import REPO_ROOT

pytestmark = pytest.mark.timeout(300)
UP_READY = "Ctrl-C stops everything"


def _cli(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "starfish_cli", *argv], cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout
    )


def _assert_one_line_error(out: subprocess.CompletedProcess, *needles: str) -> None:
    assert out.returncode != 0, out.stdout
    assert "Traceback" not in out.stderr, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "error:" in lines[0], out.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    """`starfish up` in a subprocess, until the module's tests are done."""
    root = tmp_path_factory.mktemp("cliup") / "run"
    log = open(root.parent / "up.out", "w+")  # noqa: SIM115 (the process writes to it until the end)
    proc = subprocess.Popen(
        [sys.executable, "-m", "starfish_cli", "up", "--dir", str(root), "--clients", "3"],
        cwd=REPO_ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )
    end = time.time() + 180
    while UP_READY not in Path(log.name).read_text():
        assert proc.poll() is None, Path(log.name).read_text()
        assert time.time() < end, "starfish up did not start"
        time.sleep(0.2)
    yield root
    proc.send_signal(signal.SIGINT)
    proc.wait(60)
    log.close()


def test_version():
    out = _cli("--version")
    assert out.returncode == 0 and re.fullmatch(r"starfish \S+ \(wire contract starfish\.v1\)\n", out.stdout)


def test_errors_are_one_line_without_traceback(tmp_path):
    _assert_one_line_error(
        _cli("admin", "start-training", "--model", str(tmp_path / "nope.npy"), "--arch", "m", "--lr", "0.1"),
        "nope.npy",
        "no such file",
    )
    (tmp_path / "bad.npy").write_text("not an array")
    _assert_one_line_error(
        _cli("admin", "start-training", "--model", str(tmp_path / "bad.npy"), "--arch", "m", "--lr", "0.1"),
        "not a readable .npy array",
    )
    _assert_one_line_error(
        _cli("certs", "--out", str(tmp_path / "noca"), "--issue", "party0"), "lacks ca.pem and ca.key"
    )
    _assert_one_line_error(_cli("up", "--dir", "/proc/x"), "cannot use /proc/x as the deployment directory")
    _assert_one_line_error(_cli("admin", "--dir", str(tmp_path), "status"), "holds no deployment")


def test_second_up_on_a_running_directory_is_refused(deployment):
    _assert_one_line_error(_cli("up", "--dir", str(deployment)), "in use by another `starfish up`", "pid ")


def test_options_before_or_after_the_subcommand_and_readable_status(deployment, tmp_path):
    model = tmp_path / "m0.npy"
    np.save(model, np.zeros(4, dtype=np.float32))
    started = _cli(
        "admin", "start-training", "--model", str(model), "--arch", "tiny", "--lr", "0.1", "--dir", str(deployment)
    )
    assert started.returncode == 0, started.stderr
    assert "training:" in started.stdout and "registered clients: 0" in started.stdout
    before = _cli("admin", "--dir", str(deployment), "status")
    after = _cli("admin", "status", "--dir", str(deployment))
    assert before.returncode == after.returncode == 0, (before.stderr, after.stderr)
    for out in (before, after):
        assert re.search(r"training: open, round 1 open", out.stdout), out.stdout
        assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", out.stdout), out.stdout  # the round's opening date
    data = json.loads(_cli("admin", "status", "--json", "--dir", str(deployment)).stdout)
    assert data["phase"] == "open" and data["open_round"] == 1 and isinstance(data["rounds"][0]["peer_bytes"], int)
    assert json.loads(_cli("admin", "--json", "--dir", str(deployment), "status").stdout)["phase"] == "open"


def test_jobs_listing_and_cancel_of_an_unknown_job(deployment):
    listing = _cli("admin", "jobs", "--dir", str(deployment))
    assert listing.returncode == 0 and listing.stdout.strip() == "no unlearning jobs", listing
    assert json.loads(_cli("admin", "jobs", "--dir", str(deployment), "--json").stdout) == {"jobs": []}
    _assert_one_line_error(_cli("admin", "cancel", "jnope", "--dir", str(deployment)), "NOT_FOUND", "jnope")
    _assert_one_line_error(  # party0 parses the request's JSON (once) and names what is wrong
        _cli("admin", "unlearn", "client0", "--params", "{nope", "--dir", str(deployment)),
        "INVALID_ARGUMENT",
        "parameters_json is not valid JSON",
    )
