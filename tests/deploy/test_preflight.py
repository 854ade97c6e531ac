"""`starfish preflight`: each failure an operator can meet before the first start is caught
and named — expired certificate, wrong identity, unreadable key, unreachable peer, port in use."""

from __future__ import annotations

import datetime as dt
import os
import pwd
import shutil
import socket
import ssl
import threading
from pathlib import Path

import pytest

from harness.local import LocalDeployment
from mpc.plane.certificate_authority import issue_cert
from mpc.plane.tls import TlsFiles, server_context
from server.file_modes import private_dir
from starfish_cli.entry import main
from starfish_cli.preflight.run import Options, run_checks


class TlsListener:
    """A mutual-TLS listener presenting `name`'s certificate (stands in for a peer's port)."""

    def __init__(self, certs: Path, name: str, port: int) -> None:
        self.ctx = server_context(TlsFiles(certs / "ca.pem", certs / f"{name}.pem", certs / f"{name}.key"))
        self.sock = socket.create_server(("127.0.0.1", port))
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            try:
                with self.ctx.wrap_socket(conn, server_side=True) as tls:
                    tls.recv(1)
            except (OSError, ssl.SSLError):
                pass

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def dep(tmp_path):
    return LocalDeployment(tmp_path / "dep", clients=["c0"])


def _rows(dep, role=0, **opts):
    rows = run_checks(dep.config_path(role), Options(**opts))
    return {r.name: r for r in rows}, rows


def _failures(rows) -> list[str]:
    return [f"{r.name}: {r.detail}" for r in rows if r.status == "FAIL"]


def _peers(dep):
    ports = dep.creds["ports"]
    certs = dep.root / "certs"
    return [TlsListener(certs, "party1", ports["peer1"]), TlsListener(certs, "dealer", ports["dealer"])]


def test_a_sound_installation_passes_and_names_what_it_checked(dep, capsys):
    listeners = _peers(dep)
    try:
        assert main(["preflight", "--config", str(dep.config_path(0))]) == 0
    finally:
        for listener in listeners:
            listener.close()
    out = capsys.readouterr().out
    assert "reach peer" in out and "TLSv1.3, identity 'party1'" in out and "identity 'dealer'" in out
    assert "0 failed" in out


def test_an_expired_certificate_fails(dep):
    now = dt.datetime.now(dt.UTC)
    issue_cert(dep.root / "certs", "party0", not_before=now - dt.timedelta(days=3), valid_days=1)
    _, rows = _rows(dep, reach=False)
    assert any("validity" in f and "expired on" in f for f in _failures(rows)), _failures(rows)


def test_a_certificate_expiring_soon_warns(dep):
    issue_cert(dep.root / "certs", "party0", valid_days=5)
    by_name, rows = _rows(dep, reach=False)
    assert not _failures(rows)
    assert by_name["TLS certificate party0.pem: validity"].status == "WARN"
    assert "expires in" in by_name["TLS certificate party0.pem: validity"].detail


def test_a_wrong_identity_fails_locally_and_at_the_peer(dep):
    certs = dep.root / "certs"
    shutil.copy(certs / "party1.pem", certs / "party0.pem")
    shutil.copy(certs / "party1.key", certs / "party0.key")
    _, rows = _rows(dep, reach=False)
    assert any("wrong identity: names 'party1', expected 'party0'" in f for f in _failures(rows))

    other = LocalDeployment(dep.root.parent / "other", clients=["c0"])
    ports = other.creds["ports"]
    impostor = TlsListener(other.root / "certs", "dealer", ports["peer1"])  # the dealer's certificate on party1's port
    try:
        _, rows = _rows(other, timeout_s=3)
    finally:
        impostor.close()
    assert any("reach peer" in f and "presents 'dealer', expected 'party1'" in f for f in _failures(rows))


def test_an_unreachable_peer_fails(dep):
    _, rows = _rows(dep, timeout_s=2)
    failures = _failures(rows)
    assert any(f.startswith("reach peer") and "unreachable" in f for f in failures), failures
    assert any(f.startswith("reach dealer") and "unreachable" in f for f in failures), failures


def test_a_port_in_use_fails(dep):
    port = dep.creds["ports"]["client0"]
    with socket.create_server(("127.0.0.1", port)):
        _, rows = _rows(dep, reach=False)
    assert any(f"127.0.0.1:{port} in use" in f for f in _failures(rows)), _failures(rows)


def test_a_key_readable_by_others_or_owned_by_another_user_fails(dep):
    key = dep.root / "certs" / "party0.key"
    key.chmod(0o640)
    _, rows = _rows(dep, reach=False)
    assert any("readable by group or others (mode 0640)" in f for f in _failures(rows))
    key.chmod(0o600)
    if os.geteuid() == 0:  # root reads any file: a key it does not own is still the wrong owner
        os.chown(key, pwd.getpwnam("nobody").pw_uid, -1)
        _, rows = _rows(dep, reach=False, user="root")
        assert any("owned by nobody, not the service user root" in f for f in _failures(rows))


def test_an_unreadable_key_fails(dep):
    """A key the service user cannot read (root's 0600 file: an install that forgot the
    ownership) is named, whoever runs preflight."""
    key = dep.root / "certs" / "party0.key"
    if os.geteuid() == 0:
        os.chown(key, 0, 0)
        _, rows = _rows(dep, reach=False, user="nobody")
        expected = "unreadable by nobody: permission denied (owner root, 0600)"
    else:
        key.chmod(0o000)
        _, rows = _rows(dep, reach=False)
        expected = "unreadable by"
    assert any(f.startswith(f"key {key}") and expected in f for f in _failures(rows)), _failures(rows)


def test_the_dealer_config_is_checked_against_its_identity(dep, capsys):
    assert main(["preflight", "--config", str(dep.dealer_config_path)]) == 0
    assert main(["preflight", "--config", str(dep.dealer_config_path), "--identity", "dealer2"]) == 1
    assert "wrong identity: names 'dealer', expected 'dealer2'" in capsys.readouterr().out


def test_the_running_dealer_answers_its_health_service(dep, capsys):
    dealer = ["preflight", "--config", str(dep.dealer_config_path), "--no-bind"]
    assert main(dealer) == 1  # not running: no health answer
    assert "unreachable" in capsys.readouterr().out
    private_dir(dep.root / "logs")
    dep.start_dealer()
    try:
        assert main(dealer) == 0
        out = capsys.readouterr().out
        assert f"health 127.0.0.1:{dep.creds['ports']['dealer_health']}" in out
        assert "SERVING, TLSv1.3, identity 'dealer'" in out
        assert main(["preflight", "--config", str(dep.dealer_config_path)]) == 1  # its ports are in use
        assert "in use by another process" in capsys.readouterr().out
    finally:
        dep.stop_dealer()
