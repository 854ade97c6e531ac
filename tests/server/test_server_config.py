"""Party configuration: valid files load; every malformed value is refused with a message naming it."""

import math
from pathlib import Path

import pytest

from server.config import ConfigError, load_config, parse_config, token_digest
from server.unlearning_policy import DEFAULT_BOUNDS

BASE = {
    "role": 0,
    "listen": "127.0.0.1:1",
    "peer_listen": "127.0.0.1:2",
    "peer_address": "127.0.0.1:3",
    "data_dir": "d",
    "tls": {"ca": "ca.pem", "cert": "p.pem", "key": "p.key"},
}


def test_defaults_and_relative_paths(tmp_path: Path):
    cfg = parse_config(dict(BASE, auth={"clients": {"alice": token_digest("t")}}), tmp_path)
    assert cfg.data_dir == tmp_path / "d"
    assert cfg.tls.peer_name == "party1"
    assert cfg.precision_bits == 16
    assert cfg.clients == {"alice": token_digest("t")}
    assert cfg.principals == {}  # no enrollment record: alice is her own principal
    auth = {"clients": {"alice": token_digest("t")}, "principals": {"alice": "acme-labs"}}
    assert parse_config(dict(BASE, auth=auth), tmp_path).principals == {"alice": "acme-labs"}
    assert cfg.limits.chunk_bytes < cfg.limits.max_message_bytes
    assert cfg.signing.cert is None and cfg.observability.metrics_listen == ""  # no signing key, no endpoint
    assert cfg.privacy.min_cohort == 3  # every revealed aggregate covers at least 3 clients
    assert parse_config(dict(BASE, privacy={"min_cohort": 2}), tmp_path).privacy.min_cohort == 2
    signed = parse_config(dict(BASE, signing={"cert": "s.pem", "key": "s.key"}), tmp_path)
    assert signed.signing.cert == tmp_path / "s.pem" and signed.signing.key == tmp_path / "s.key"


@pytest.mark.parametrize(
    "patch, message",
    [
        ({"role": 2}, "role must be 0 or 1"),
        ({"fixed_point": {"precision_bits": 99}}, "precision_bits"),
        ({"auth": {"clients": {"bad id!": "0" * 64}}}, "invalid client id"),
        ({"auth": {"clients": {"alice": "plaintext-token"}}}, "sha256 hex digest"),
        ({"auth": {"admin_token_sha256": "xyz"}}, "admin_token_sha256"),
        ({"auth": {"principals": {"bob": "acme"}}}, "names client 'bob', which has no credential"),
        ({"auth": {"clients": {"bob": "0" * 64}, "principals": {"bob": "a b"}}}, "principal of client 'bob'"),
        ({"rounds": {"deadline": 3}}, "unknown key"),
        ({"rounds": {"opening": "sometimes"}}, "rounds.opening"),
        ({"limits": {"chunk_bytes": 4 * 1024 * 1024}}, "chunk_bytes"),
        ({"signing": {"cert": "s.pem"}}, r"\[signing\] needs both 'cert' and 'key'"),
        ({"signing": {"cert": "s.pem", "key": "s.key", "pin": "x"}}, "unknown key"),
        ({"observability": {"log_format": "xml"}}, "log_format must be one of"),
        ({"observability": {"metrics_listen": "9464"}}, "metrics_listen must be host:port"),
        ({"observability": {"metrics": "x"}}, "unknown key"),
        ({"fixed_point": {"max_abs": float("inf")}}, "max_abs must be a positive finite"),
        ({"rounds": {"deadline_s": float("inf")}}, "rounds.deadline_s must be a positive finite"),
        ({"rounds": {"deadline_s": float("nan")}}, "rounds.deadline_s"),
        ({"rounds": {"deadline_s": -1.0}}, "rounds.deadline_s"),
        ({"rounds": {"poll_s": 0}}, "rounds.poll_s"),
        ({"rounds": {"min_clients": 0}}, "rounds.min_clients"),
        ({"rounds": {"max_rounds": -1}}, "rounds.max_rounds must be a non-negative"),
        ({"limits": {"max_lr": float("nan")}}, "limits.max_lr"),
        ({"limits": {"max_samples": 0}}, "limits.max_samples"),
        # n_j = 1e9 at f = 16, |g| ≤ 2^20 could wrap the int64 aggregate
        ({"limits": {"max_samples": 1_000_000_000}}, "exceeds the round's sample budget 134217727"),
        ({"admission": {"max_streams_per_client": 0}}, "admission.max_streams_per_client"),
        ({"admission": {"threads": 3}}, "unknown key"),
        ({"privacy": {"min_cohort": 1}}, r"privacy.min_cohort must be an integer >= 2, got 1"),
        ({"privacy": {"min_cohort": 0}}, "privacy.min_cohort"),
        ({"privacy": {"min_cohort": 2.5}}, "privacy.min_cohort"),
        ({"privacy": {"min_cohort": True}}, "privacy.min_cohort"),
        ({"privacy": {"k": 3}}, r"unknown key 'k' in \[privacy\]"),
    ],
)
def test_bad_values_are_refused(tmp_path: Path, patch: dict, message: str):
    with pytest.raises(ConfigError, match=message):
        parse_config({**BASE, **patch}, tmp_path)


def test_missing_key_is_named(tmp_path: Path):
    data = dict(BASE)
    del data["peer_address"]
    with pytest.raises(ConfigError, match="peer_address"):
        parse_config(data, tmp_path)


def test_file_errors(tmp_path: Path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("role = [")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)


def test_shipped_default_configs_load():
    root = Path(__file__).resolve().parents[2]
    for role in (0, 1):
        cfg = load_config(root / f"party{role}" / f"party{role}.toml")
        assert cfg.role == role and cfg.tls.peer_name == f"party{1 - role}"


def test_sample_budget_follows_the_encoding(tmp_path: Path):
    """max_samples may reach the budget ⌊(2^63 − 1)/⌈max_abs·2^f⌉⌋ and no further."""
    small = {"fixed_point": {"precision_bits": 30, "max_abs": 2.0**20}}
    assert parse_config({**BASE, **small, "limits": {"max_samples": 8191}}, tmp_path).limits.max_samples == 8191
    with pytest.raises(ConfigError, match="sample budget 8191"):
        parse_config({**BASE, **small, "limits": {"max_samples": 8192}}, tmp_path)


def test_admission_threads_leave_room_for_the_admin(tmp_path: Path):
    cfg = parse_config({**BASE, "admission": {"max_streams": 10, "max_requests": 5, "admin_threads": 3}}, tmp_path)
    assert cfg.admission.threads == 18


def test_config_loads_parameters_and_bounds(tmp_path: Path):
    table = {"parameters": {"sigma": 0.5, "B": 3}, "bounds": {"eta_u": [0.01, 0.5], "B": [1, 4]}}
    cfg = parse_config(dict(BASE, unlearning=table), tmp_path)
    assert cfg.unlearning.parameters == {"sigma": 0.5, "B": 3}
    assert cfg.unlearning.bounds["eta_u"] == (0.01, 0.5)
    assert cfg.unlearning.bounds["buffer_size"] == (1.0, 4.0)  # the alias names the typed parameter
    assert parse_config(dict(BASE), tmp_path).unlearning.bounds == DEFAULT_BOUNDS


@pytest.mark.parametrize(
    "table, message",
    [
        ({"bounds": {"sigma": [0.9, 0.1]}}, "low ≤ high"),
        ({"bounds": {"sigma": [0.1, math.inf]}}, "finite"),
        ({"bounds": {"sigma": 0.5}}, r"\[low, high\]"),
        ({"bounds": {"lr": [0, 1]}}, "not a bounded parameter"),
        ({"parameters": {"eta_u": 10.0}}, "eta_u = 10 is outside"),
        ({"parameters": {"sigma": 0.5}, "bounds": {"sigma": [0.6, 1.0]}}, "sigma = 0.5 is outside"),
        ({"limit": 1}, "unknown key"),
    ],
)
def test_bad_policy_is_refused_at_config_load(tmp_path: Path, table, message):
    with pytest.raises(ConfigError, match=message):
        parse_config(dict(BASE, unlearning=table), tmp_path)
