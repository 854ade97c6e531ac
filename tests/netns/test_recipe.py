"""The deploy/ recipe provisions into configs the services accept (installing sets owners: root)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tomllib

import pytest

from harness.multihost.recipe import DEPLOY_DIR, OPERATORS, hosts, render
from mpc.plane.dealer_config import load_dealer_config
from server.config import load_config, token_digest

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="deploy/install.sh sets file owners: needs root")


@pytest.fixture(scope="module")
def recipe(tmp_path_factory):
    return render(tmp_path_factory.mktemp("recipe"), ["c1", "c2"], {"jobs": {"task_timeout_s": 7.0}}, user="nobody")


def test_every_config_loads_and_names_the_example_network(recipe):
    plan = hosts()
    p0, p1 = load_config(recipe.config_path("party0")), load_config(recipe.config_path("party1"))
    dealer = load_dealer_config(recipe.config_path("dealer"))
    assert p0.listen.startswith(plan["party0"]) and p1.listen.startswith(plan["party1"])
    assert p0.peer_address == p1.peer_listen and p1.peer_address == p0.peer_listen
    assert p0.jobs.dealer == p1.jobs.dealer == f"{dealer.host}:{dealer.port}" and dealer.host == plan["dealer"]
    assert p0.jobs.dealer_identity == p1.jobs.dealer_identity == "dealer" and p0.jobs.dealer_independent
    assert p0.jobs.mpc_host == plan["party0"] and p0.jobs.mpc_port
    assert p0.jobs.task_timeout_s == p1.jobs.task_timeout_s == 7.0  # overrides reach both parties
    assert p0.data_dir.is_relative_to(recipe.host("party0")) and p0.tls.cert.is_relative_to(recipe.etc("party0"))
    for party in (p0, p1):  # each operator signs erasure certificates with its own issued pair
        assert party.signing.cert.is_file() and party.signing.key.is_file()
        assert party.observability.metrics_listen.startswith("127.0.0.1:")  # metrics never on the bridge


def test_credentials_are_digests_and_tokens_stay_in_the_private_file(recipe):
    creds = json.loads((recipe.root / "credentials.json").read_text())
    assert (recipe.root / "credentials.json").stat().st_mode & 0o077 == 0
    for name in ("party0", "party1"):
        text = recipe.config_path(name).read_text()
        assert creds["admin_token"] not in text and all(t not in text for t in creds["clients"].values())
        assert load_config(recipe.config_path(name)).clients == {
            c: token_digest(t) for c, t in creds["clients"].items()
        }


def test_units_run_the_installed_command_on_the_rendered_config(recipe):
    for name in OPERATORS:
        argv = recipe.command(name)
        assert argv[0] == str(recipe.root / "opt" / ".venv" / "bin" / "starfish")  # /opt/starfish's console script
        assert argv[-1] == str(recipe.config_path(name))
    with pytest.raises(ValueError, match="ExecStart"):
        from harness.multihost.recipe import unit_exec_start

        unit_exec_start(DEPLOY_DIR / "hosts.toml")


@pytest.mark.skipif(
    shutil.which("nft") is None or os.geteuid() != 0, reason="checking nftables rules needs nft and root"
)
def test_firewall_files_are_valid_nftables(recipe):
    for name in OPERATORS:
        argv = ["nft", "-c", "-f", str(recipe.firewall(name))]
        check = subprocess.run(argv, check=False, capture_output=True, text=True)
        assert check.returncode == 0, check.stderr
        with open(DEPLOY_DIR / "hosts.toml", "rb") as fh:
            others = [a for h, a in tomllib.load(fh)["hosts"].items() if h in OPERATORS and h != name]
        assert any(a in recipe.firewall(name).read_text() for a in others)
