"""A party's listeners: TLS 1.3 only on the client, admin and peer ports, each port bound by one
process alone (no SO_REUSEPORT sharing), every bind failure and a certificate of another role
refused at start with the config key named (real party processes on loopback)."""

from __future__ import annotations

import ssl
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.local import LocalDeployment, render_config
from mpc.ports import free_port

from helpers.tls_handshake import negotiated_version

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def party0(tmp_path_factory) -> Iterator[LocalDeployment]:
    dep = LocalDeployment(tmp_path_factory.mktemp("hardening") / "run", clients=["alice"])
    dep.start(0)
    yield dep
    dep.stop(0)


@pytest.mark.parametrize("port_name, cert", [("client0", None), ("admin0", None), ("peer0", "party1")])
def test_grpc_ports_accept_tls13_only(party0: LocalDeployment, port_name: str, cert: str | None):
    port = party0.creds["ports"][port_name]
    assert negotiated_version(party0, f"127.0.0.1:{port}", ssl.TLSVersion.TLSv1_3, cert) == "TLSv1.3"
    with pytest.raises(ssl.SSLError):
        negotiated_version(party0, f"127.0.0.1:{port}", ssl.TLSVersion.TLSv1_2, cert)


def _second_party0(dep: LocalDeployment, tmp_name: str, **changes) -> subprocess.CompletedProcess:
    """Start another party0 process from party0's config with `changes`; it must exit at once."""
    data = tomllib.loads(dep.config_path(0).read_text())
    data.update(
        data_dir=tmp_name,
        listen=f"127.0.0.1:{free_port()}",
        admin_listen=f"127.0.0.1:{free_port()}",
        peer_listen=f"127.0.0.1:{free_port()}",
        observability={"metrics_listen": f"127.0.0.1:{free_port()}"},
    )
    for key, value in changes.items():
        section, _, name = key.rpartition("__")
        (data[section] if section else data)[name] = value
    path = dep.root / f"{tmp_name}.toml"
    path.write_text(render_config(data))
    return subprocess.run(
        [sys.executable, "-m", "party0", "--config", str(path)], cwd=REPO, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    "key, port_name",
    [
        ("listen", "client0"),
        ("admin_listen", "admin0"),
        ("peer_listen", "peer0"),
        ("observability__metrics_listen", "metrics0"),
    ],
)
def test_a_second_process_on_a_live_port_is_refused_naming_the_key(party0: LocalDeployment, key: str, port_name: str):
    address = f"127.0.0.1:{party0.creds['ports'][port_name]}"
    proc = _second_party0(party0, f"second-{port_name}", **{key: address})
    assert proc.returncode != 0
    assert f"{key.replace('__', '.')} = '{address}': cannot bind" in proc.stderr
    assert "serving clients" not in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"listen": "127.0.0.1:99999"}, "listen must be 'host:port' with a numeric port in 1..65535"),
        ({"listen": "127.0.0.1:http"}, "listen must be 'host:port' with a numeric port in 1..65535"),
        ({"tls__cert": "certs/party1.pem", "tls__key": "certs/party1.key"}, "names 'party1', but this is party0"),
    ],
)
def test_a_misconfigured_party_refuses_to_start(party0: LocalDeployment, changes: dict, message: str):
    proc = _second_party0(party0, "misconfigured", **changes)
    assert proc.returncode != 0
    assert message in proc.stderr
    assert "serving clients" not in proc.stderr and "Traceback" not in proc.stderr
