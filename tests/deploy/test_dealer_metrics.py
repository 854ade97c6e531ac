"""The dealer's metrics endpoint: the dealer process (`starfish dealer`) serves its identity,
its sessions and its certificates' expiry, like the parties."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request

import pytest

from harness.local import render_config
from mpc.plane.certificate_authority import make_certs, not_after
from mpc.ports import free_port


def _scrape(url: str, deadline_s: float = 60.0) -> str:
    end = time.monotonic() + deadline_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                return resp.read().decode()
        except OSError:
            if time.monotonic() > end:
                raise
            time.sleep(0.2)


def _value(text: str, series: str) -> float:
    line = next(line for line in text.splitlines() if line.startswith(series + " "))
    return float(line.split()[-1])


def test_the_dealer_process_exports_its_metrics(tmp_path):
    make_certs(tmp_path / "certs")
    metrics = f"127.0.0.1:{free_port()}"
    config = {
        "listen": f"127.0.0.1:{free_port()}",
        "tls": {"ca": "certs/ca.pem", "cert": "certs/dealer.pem", "key": "certs/dealer.key"},
        "observability": {"metrics_listen": metrics},
    }
    (tmp_path / "dealer.toml").write_text(render_config(config))
    proc = subprocess.Popen(
        [sys.executable, "-m", "starfish_cli", "dealer", "--config", str(tmp_path / "dealer.toml")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        text = _scrape(f"http://{metrics}/metrics")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert _value(text, 'starfish_dealer_info{identity="dealer"}') == 1
    assert _value(text, "starfish_dealer_sessions_running") == 0
    tls = _value(text, 'starfish_certificate_expiry_timestamp_seconds{use="tls"}')
    assert tls == not_after(tmp_path / "certs" / "dealer.pem")


def test_a_bad_metrics_address_is_refused(tmp_path):
    from mpc.plane.dealer_config import DealerConfigError, parse_dealer_config

    data = {"listen": "127.0.0.1:7300", "tls": {"ca": "a", "cert": "b", "key": "c"}}
    assert parse_dealer_config({**data, "observability": {"metrics_listen": "127.0.0.1:9466"}}, tmp_path)
    with pytest.raises(DealerConfigError, match="observability.metrics_listen"):
        parse_dealer_config({**data, "observability": {"metrics_listen": "nowhere"}}, tmp_path)
