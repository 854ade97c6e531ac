"""One schema per process: unknown keys and sections refused with the nearest spelling, addresses
checked before anything binds, the reference tables of the guides generated from the schema."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from mpc.plane.dealer_config import DEALER_SCHEMA, DealerConfigError, parse_dealer_config
from mpc.plane.dealer_service import DealerLimits
from mpc.toml_schema import SchemaError
from server import config_doc
from server.config import (
    AdmissionConfig,
    ConfigError,
    EvaluationConfig,
    LimitConfig,
    ObservabilityConfig,
    PrivacyConfig,
    RoundConfig,
    parse_config,
    party_schema,
)
from server.job_config import JobConfig
from tests.server.test_server_config import BASE

DEALER = {"listen": "127.0.0.1:7300", "tls": {"ca": "ca.pem", "cert": "d.pem", "key": "d.key"}}


@pytest.mark.parametrize(
    "patch, message",
    [
        (
            {"listen_adress": "127.0.0.1:4"},
            "'listen_adress' at the top level (did you mean 'peer_address' or 'listen'?)",
        ),
        ({"observabilty": {"metrics_listen": "127.0.0.1:9"}}, "unknown section 'observabilty' at the top level"),
        ({"observabilty": {}}, "(did you mean 'observability'"),
        ({"jobs": {"deler": "127.0.0.1:9"}}, "unknown key 'deler' in [jobs] (did you mean 'dealer'"),
        ({"tls": {**BASE["tls"], "peer_nmae": "p"}}, "unknown key 'peer_nmae' in [tls] (did you mean 'peer_name'"),
        ({"unlearning": {"bounds": {}, "paramters": {}}}, "unknown section 'paramters' in [unlearning]"),
        ({"auth": {"client": {}}}, "(did you mean 'clients'"),
        (
            {"listen": "127.0.0.1:99999"},
            "listen must be 'host:port' with a numeric port in 1..65535, got '127.0.0.1:99999'",
        ),
        ({"listen": "127.0.0.1:http"}, "listen must be 'host:port' with a numeric port"),
        ({"peer_listen": "127.0.0.1:0"}, "peer_listen must be 'host:port'"),
        ({"peer_address": "party1"}, "peer_address must be 'host:port'"),
        ({"observability": {"metrics_listen": "127.0.0.1:http"}}, "metrics_listen"),
    ],
)
def test_party_config_refuses_unknown_keys_and_bad_addresses(tmp_path: Path, patch: dict, message: str):
    with pytest.raises(ConfigError) as err:
        parse_config({**BASE, **patch}, tmp_path)
    assert message in str(err.value)


def _sections():
    return [s for s in party_schema().sections if not s.free]


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(_sections()), st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=16))
def test_any_unknown_key_in_any_section_is_named(section, key):
    assume(key not in section.names() and key not in {"clients", "parameters", "bounds"})
    data: dict = {**BASE, "tls": dict(BASE["tls"])}
    table = data
    for part in [p for p in section.name.split(".") if p]:
        table = table.setdefault(part, {})
    table[key] = 1
    with pytest.raises(ConfigError, match=f"unknown key '{key}' {section.where.replace('[', '.').replace(']', '.')}"):
        parse_config(data, Path("/nonexistent"))


@pytest.mark.parametrize(
    "section, cls",
    [
        ("rounds", RoundConfig),
        ("limits", LimitConfig),
        ("admission", AdmissionConfig),
        ("observability", ObservabilityConfig),
        ("jobs", JobConfig),
        ("privacy", PrivacyConfig),
        ("evaluation", EvaluationConfig),
    ],
)
def test_schema_names_every_setting(section: str, cls: type):
    assert {f.name for f in dataclasses.fields(cls)} <= party_schema().section(section).names()


def test_dealer_shares_the_mechanism(tmp_path: Path):
    assert {f.name for f in dataclasses.fields(DealerLimits)} == DEALER_SCHEMA.section("limits").names()
    with pytest.raises(
        DealerConfigError, match=r"unknown key 'max_sesions' in \[limits\] \(did you mean 'max_sessions'"
    ):
        parse_dealer_config({**DEALER, "limits": {"max_sesions": 3}}, tmp_path)
    with pytest.raises(SchemaError, match=r"listen must be 'host:port' with a numeric port"):
        parse_dealer_config({**DEALER, "listen": "127.0.0.1:http"}, tmp_path)


def test_guides_hold_the_generated_tables():
    for path, schema in config_doc.targets():
        text = path.read_text(encoding="utf-8")
        assert config_doc.render(text, schema) == text, f"{path} is stale: run python -m server.config_doc"
