"""The install script and the systemd units as installed: ownership and modes of keys and
directories, the units' hardening (`systemd-analyze security` ≤ 4.0) and `systemd-analyze verify`."""

from __future__ import annotations

import os
import pwd
import re
import shutil
import stat
import subprocess
import sys

import pytest

from mpc.plane.certificate_authority import make_ca, sign_request
from starfish_cli.deployment.bundle import DEPLOY_DIR
from starfish_cli.entry import main

INSTALL = DEPLOY_DIR / "install.sh"
ROLES = ("party0", "party1", "dealer")
analyze = shutil.which("systemd-analyze")


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.skipif(os.geteuid() != 0, reason="installing sets file owners: needs root")
@pytest.mark.parametrize("role", ["party0", "dealer"])
def test_install_gives_the_service_user_its_keys_and_private_directories(tmp_path, role):
    bundle, ca = tmp_path / "bundle", tmp_path / "ca"
    spec = str(DEPLOY_DIR / "deployment.toml")
    assert main(["deploy", "render", "--spec", spec, "--role", role, "--out", str(bundle)]) == 0
    make_ca(ca)
    for csr in (bundle / "certs").glob("*.csr"):  # the CA's answer comes back into the bundle
        csr.with_suffix(".pem").write_bytes(sign_request(ca, csr.read_bytes()))
    shutil.copy(ca / "ca.pem", bundle / "certs" / "ca.pem")
    root = tmp_path / "root"
    env = {**os.environ, "STARFISH_ROOT": str(root), "SERVICE_USER": "nobody"}
    subprocess.run(["bash", str(INSTALL), role, str(bundle)], check=True, env=env, capture_output=True)
    nobody = pwd.getpwnam("nobody").pw_uid
    certs = root / "etc" / "starfish" / "certs"
    assert _mode(certs) == 0o700 and certs.stat().st_uid == nobody
    keys = sorted(p.name for p in certs.glob("*.key"))
    assert keys == ([f"{role}-signing.key", f"{role}.key"] if role != "dealer" else ["dealer.key"])
    for key in certs.glob("*.key"):
        assert _mode(key) == 0o600 and key.stat().st_uid == nobody
    assert not list((bundle / "certs").glob("*.key"))  # the only copy of a key is the installed one
    var = root / "var" / "lib" / "starfish"
    assert _mode(var) == 0o700
    if role != "dealer":
        assert _mode(var / role) == 0o700 and (var / role).stat().st_uid == nobody
    assert _mode(root / "etc" / "starfish" / f"{role}.toml") == 0o640
    assert (root / "etc" / "systemd" / "system" / f"starfish-{role}.service").is_file()


def test_install_refuses_an_unknown_role(tmp_path):
    proc = subprocess.run(["bash", str(INSTALL), "party2", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 2 and "unknown role party2" in proc.stderr


@pytest.mark.skipif(analyze is None, reason="systemd-analyze is not installed")
@pytest.mark.parametrize("role", ROLES)
def test_units_are_hardened_and_verify(tmp_path, role):
    unit = DEPLOY_DIR / "systemd" / f"starfish-{role}.service"
    copy = tmp_path / unit.name
    shutil.copy(unit, copy)
    out = subprocess.run(
        [analyze, "security", "--offline=yes", str(copy)], capture_output=True, text=True, timeout=120
    ).stdout
    score = float(re.search(r"Overall exposure level for \S+: ([0-9.]+)", out).group(1))
    assert score <= 4.0, out
    # verify with the code root mapped to a stand-in of the installed entry point
    opt = tmp_path / "opt"
    (opt / ".venv" / "bin").mkdir(parents=True)
    entry = opt / ".venv" / "bin" / "starfish"
    entry.write_text(f'#!/bin/sh\nexec {sys.executable} -m starfish_cli "$@"\n')
    entry.chmod(0o755)
    copy.write_text(unit.read_text().replace("/opt/starfish", str(opt)))
    proc = subprocess.run([analyze, "verify", str(copy)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
