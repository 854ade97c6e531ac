"""Every service entry point starts the way its systemd unit starts it and serves TLS 1.3 only:
`starfish party --role 0|1` and `starfish dealer` through an installed `starfish` console
script (the units' `ExecStart=`, working directory `/`, the units' environment), and
`python -m party0`. gRPC's TLS 1.2 suites are fixed when gRPC loads, so an entry path that
loads gRPC before `server.tls_floor.require_tls13()` would exit at start (real processes)."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.local import LocalDeployment
from harness.multihost.recipe import DEPLOY_DIR, console_script, unit_environment

from helpers.tls_handshake import negotiated_version

START_TIMEOUT_S = 180.0


@pytest.fixture(scope="module")
def dep(tmp_path_factory):
    root = tmp_path_factory.mktemp("entry")
    dep = LocalDeployment(root / "dep", clients=["c0"])
    dep.script = console_script(root / "starfish")  # type: ignore[attr-defined]
    return dep


def _launch(dep: LocalDeployment, argv: list[str], unit: str, log: Path) -> subprocess.Popen:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **unit_environment(DEPLOY_DIR / "systemd" / unit)}
    with open(log, "wb") as out:
        return subprocess.Popen(argv, cwd="/", env=env, stdout=out, stderr=subprocess.STDOUT)


def _assert_tls13_only(dep: LocalDeployment, address: str, cert: str | None = None) -> None:
    assert negotiated_version(dep, address, ssl.TLSVersion.TLSv1_3, cert) == "TLSv1.3"
    with pytest.raises(ssl.SSLError):
        negotiated_version(dep, address, ssl.TLSVersion.TLSv1_2, cert)


def _health(dep: LocalDeployment, address: str) -> str:
    """The overall status the dealer's gRPC health service answers (its certificate names
    `localhost` among its addresses)."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    creds = grpc.ssl_channel_credentials(root_certificates=dep.ca_cert.read_bytes())
    with grpc.secure_channel(address, creds, options=[("grpc.ssl_target_name_override", "localhost")]) as ch:
        reply = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10)
    return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("role, how", [(0, "starfish"), (1, "starfish"), (0, "module")])
def test_a_party_starts_as_its_unit_starts_it(dep, role, how, tmp_path):
    config = str(dep.config_path(role))
    argv = (
        [str(dep.script), "party", "--role", str(role), "--config", config]
        if how == "starfish"
        else [sys.executable, "-m", f"party{role}", "--config", config]
    )
    proc = _launch(dep, argv, f"starfish-party{role}.service", tmp_path / "party.log")
    dep.procs[role] = proc
    try:
        dep.wait_healthy(role, START_TIMEOUT_S)
        _assert_tls13_only(dep, dep.address(role))
    except Exception:
        print((tmp_path / "party.log").read_text()[-3000:])
        raise
    finally:
        dep.procs.pop(role, None)
        _stop(proc)
    assert "TLS 1.3 floor" not in (tmp_path / "party.log").read_text()


def test_the_dealer_starts_as_its_unit_starts_it(dep, tmp_path):
    log = tmp_path / "dealer.log"
    argv = [str(dep.script), "dealer", "--config", str(dep.dealer_config_path)]
    proc = _launch(dep, argv, "starfish-dealer.service", log)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while b"dealer listening on" not in log.read_bytes():
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.1)
        _assert_tls13_only(dep, dep.dealer_address, "party0")
        health = f"127.0.0.1:{dep.creds['ports']['dealer_health']}"
        _assert_tls13_only(dep, health)  # the dealer's gRPC health port: the floor holds there too
        assert _health(dep, health) == "SERVING"
    finally:
        _stop(proc)
