"""The Starfish keys of a Flower run: read when the app runs, node config over run config,
and a clear error for what is missing or unusable."""

from __future__ import annotations

import json

import pytest
from flwr.app import Context, RecordDict

from starfish_flower import app_config
from starfish_flower.app_config import ConfigError, StarfishConfig


def _deployment(tmp_path):
    (tmp_path / "certs").mkdir()
    (tmp_path / "certs" / "ca.pem").write_text("-")
    creds = {
        "admin_token": "a",
        "clients": {"client2": "t2"},
        "ports": {"client0": 5001, "client1": 5002, "admin0": 5003},
    }
    (tmp_path / "credentials.json").write_text(json.dumps(creds))
    return tmp_path


def _context(run_config: dict, node_config: dict) -> Context:
    return Context(run_id=1, node_id=3, node_config=node_config, state=RecordDict(), run_config=run_config)


def test_a_starfish_up_directory_gives_addresses_ca_and_credentials_and_set_keys_win(tmp_path):
    root = _deployment(tmp_path)
    config = StarfishConfig.from_mapping({"starfish-dir": str(root), "starfish-party1": "10.0.0.2:7", "x": 1})
    assert (config.party0, config.party1) == ("127.0.0.1:5001", "10.0.0.2:7")
    assert config.admin_address == "127.0.0.1:5003"  # party0's admin API: its own listener
    assert config.ca_cert == root / "certs" / "ca.pem" and config.credentials == root / "credentials.json"


def test_missing_parties_and_relative_paths_are_refused_with_the_key(tmp_path):
    with pytest.raises(ConfigError, match="sets neither starfish-dir nor"):
        StarfishConfig.from_mapping({"starfish-dir": "", "starfish-party0": "h:1"})
    with pytest.raises(ConfigError, match="starfish-dir = 'run' must be an absolute path"):
        StarfishConfig.from_mapping({"starfish-dir": "run"})
    with pytest.raises(ConfigError, match="does not exist"):
        StarfishConfig.from_mapping({"starfish-dir": str(tmp_path / "absent")})


def test_a_simulated_node_uses_its_partition_and_a_supernode_its_own_credential(tmp_path):
    root = _deployment(tmp_path)
    run = {"starfish-dir": str(root)}
    assert app_config.identity(_context(run, {"partition-id": 2})) == ("client2", "t2")
    token = tmp_path / "alice.token"
    token.write_text("secret\n")
    node = {"starfish-client-id": "alice", "starfish-token-file": str(token)}
    assert app_config.identity(_context(run, node)) == ("alice", "secret")
    with pytest.raises(ConfigError, match="must set both"):
        app_config.identity(_context(run, {"starfish-client-id": "alice"}))
    with pytest.raises(ConfigError, match="no credential for client 'client7'"):
        app_config.identity(_context(run, {"partition-id": 7}))
