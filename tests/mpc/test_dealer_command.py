"""`starfish dealer --config`: refuses bad configurations, serves sessions as a real process,
listens on the configured address only, and stops on SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from mpc.plane.dealer_client import open_dealer_link
from mpc.plane.dealer_ops import request
from mpc.plane.tls import client_context
from mpc.ports import free_port
from starfish_cli.entry import main

from helpers.plane_helpers import Pki, both

ROOT = Path(__file__).resolve().parents[2]


def _write_config(path: Path, certs: Path, listen: str, extra: str = "") -> Path:
    path.write_text(
        f'listen = "{listen}"\n{extra}\n[tls]\nca = "{certs}/ca.pem"\ncert = "{certs}/dealer.pem"\n'
        f'key = "{certs}/dealer.key"\n[parties]\nparty0 = "party0"\nparty1 = "party1"\n'
    )
    return path


@pytest.mark.parametrize(
    "listen, extra, message",
    [
        ("127.0.0.1", "", "host:port"),
        ("127.0.0.1:7300", "colour = 1", "unknown key"),
        ("127.0.0.1:7300", "[limits]\nmax_sessions = 0", "max_sessions"),
        ("127.0.0.1:7300", "[limits]\nmax_request_elements = 1000000", "below the parties' request blocks"),
    ],
)
def test_bad_configuration_refused(tmp_path, capsys, listen, extra, message):
    cfg = _write_config(tmp_path / "dealer.toml", tmp_path, listen, extra)
    assert main(["dealer", "--config", str(cfg)]) == 2
    assert message in capsys.readouterr().err


def test_missing_certificate_refused(tmp_path, capsys):
    cfg = _write_config(tmp_path / "dealer.toml", tmp_path / "nowhere", "127.0.0.1:7300")
    assert main(["dealer", "--config", str(cfg)]) == 2
    assert "starfish certs" in capsys.readouterr().err


def _listening(port: int) -> list[str]:
    out = subprocess.run(["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True, check=True).stdout
    return [line.split()[3] for line in out.splitlines() if line.strip()]


def _lines_until(proc: subprocess.Popen, text: str) -> str:
    """The process's output up to and including the first line holding `text` (or to its end)."""
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if text in line:
            break
    return "".join(lines)


@pytest.mark.timeout(240)
def test_dealer_process_serves_a_session_and_stops_on_sigterm(tmp_path):
    pki = Pki.make(tmp_path)
    port = free_port()
    cfg = _write_config(tmp_path / "dealer.toml", pki.good, f"127.0.0.1:{port}")
    proc = subprocess.Popen(
        [sys.executable, "-m", "starfish_cli", "dealer", "--config", str(cfg)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert f"dealer listening on 127.0.0.1:{port} for party0 and party1" in proc.stdout.readline()
        assert _listening(port) == [f"127.0.0.1:{port}"]  # not 0.0.0.0 / * / [::]
        link0, link1 = both(
            lambda: open_dealer_link("127.0.0.1", port, client_context(pki.files("party0")), "dealer", "cmd.1", 0, 30),
            lambda: open_dealer_link("127.0.0.1", port, client_context(pki.files("party1")), "dealer", "cmd.1", 1, 30),
        )
        op, req = request("mul", [(4,), (4,)])
        (a0, b0), c0 = op.party_shares(link0.prg, 0, req, lambda r: link0.fetch(r, (4,)))
        (a1, b1), c1 = op.party_shares(link1.prg, 1, req, lambda r: None)
        assert torch.equal(c0 + c1, (a0 + a1) * (b0 + b1))
        assert link0.info.identity == "dealer" and len(link0.info.certificate_sha256) == 64
        link0.close()
        ended = "session cmd.1 finished after 1 requests"
        seen = _lines_until(proc, ended)  # the dealer ends the session before it is told to stop
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        log = seen + proc.stdout.read()
        assert ended in log
        assert link0.prg.words and "key" not in log.lower().replace("keys", "")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    time.sleep(0.1)
    assert _listening(port) == []
