"""`[privacy]`'s DP keys and the Stage I noise of aggregate shares (privacy.settings, server.stage1_dp)."""

from __future__ import annotations

import json
import math
import stat
from pathlib import Path

import pytest
from opacus.accountants import RDPAccountant

from privacy.settings import DPSettings, parse_dp_config
from server.config import ConfigError, parse_config
from server.stage1_dp import Stage1Privacy

BASE = {
    "role": 0,
    "listen": "127.0.0.1:1",
    "peer_listen": "127.0.0.1:2",
    "peer_address": "127.0.0.1:3",
    "data_dir": "d",
    "tls": {"ca": "ca.pem", "cert": "p.pem", "key": "p.key"},
}


def test_dp_is_off_by_default_and_min_cohort_is_left_to_its_owner(tmp_path: Path):
    assert parse_config(dict(BASE), tmp_path).dp.settings is None
    cfg = parse_config(dict(BASE, privacy={"min_cohort": 3}), tmp_path)
    assert not cfg.dp.dp and cfg.dp.settings is None
    table = {"dp": True, "clip": 2.0, "noise_multiplier": 1.5, "min_cohort": 3}
    on = parse_config(dict(BASE, privacy=table, jobs={"dealer": "127.0.0.1:4"}), tmp_path)
    assert on.dp.settings == DPSettings(clip=2.0, noise_multiplier=1.5, delta=1e-5, schedule="fixed")
    with pytest.raises(ConfigError, match=r"dp = true needs \[jobs\] dealer"):  # Stage I clips in 2PC
        parse_config(dict(BASE, privacy=table), tmp_path)


def test_epsilon_target_gives_the_accountants_noise_multiplier():
    cfg = parse_dp_config({"dp": True, "epsilon": 8.0, "planned_releases": 40, "delta": 1e-6})
    z = cfg.settings.noise_multiplier
    accountant = RDPAccountant()
    accountant.history = [(z, 1.0, 40)]
    assert accountant.get_epsilon(1e-6) <= 8.0  # the noise meets the target over the planned releases
    accountant.history = [(z * 0.9, 1.0, 40)]
    assert accountant.get_epsilon(1e-6) > 8.0  # and is not much more than needed


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"dp": "yes"}, "privacy.dp must be true or false"),
        ({"dp": True, "clip": 0}, "privacy.clip"),
        ({"dp": True, "clip": math.nan}, "privacy.clip"),
        ({"dp": True, "noise_multiplier": -1}, "privacy.noise_multiplier"),
        ({"dp": True, "delta": 1.5}, "privacy.delta"),
        ({"dp": True, "schedule": "adaptive"}, "privacy.schedule"),
        ({"dp": True, "schedule": 3}, "privacy.schedule must be a string"),
        ({"dp": True, "epsilon": 4.0}, "planned_releases"),
        ({"dp": True, "epsilon": 4.0, "planned_releases": 10, "noise_multiplier": 1.0}, "not both"),
        ({"dp": True, "epsilon": -1.0, "planned_releases": 10}, "privacy.epsilon must be > 0"),
        ({"dp": True, "planned_releases": 10}, "only used with privacy.epsilon"),
        ({"dp": True, "noise": 1.0}, "unknown key"),
    ],
)
def test_bad_privacy_values_are_refused_with_the_key_named(tmp_path: Path, table: dict, message: str):
    with pytest.raises(ConfigError, match=message):
        parse_config(dict(BASE, privacy=table), tmp_path)


def test_stage1_noise_key_is_stable_for_a_retry_and_rounds_are_logged_once(tmp_path: Path):
    settings = DPSettings(clip=1.0, noise_multiplier=2.0, delta=1e-5)
    party = Stage1Privacy(tmp_path, settings)
    first = party.round_key(1, "digest-1")
    assert party.round_key(1, "digest-1") == first  # a retried clip session opens the same noise
    assert party.round_key(2, "digest-1") != first and party.round_key(1, "digest-2") != first
    party.record(1, ["b", "a"])
    party.record(1, ["a", "b"])  # a retried session is logged again, counted once
    party.record(2, ["a", "b"])
    assert [(r.label, r.members) for r in party.releases()] == [
        ("stage1 round 1", ("a", "b")),
        ("stage1 round 2", ("a", "b")),
    ]
    assert [r.label for r in party.releases(up_to=1)] == ["stage1 round 1"]
    assert len((tmp_path / "dp" / "releases.jsonl").read_text().splitlines()) == 3  # every session logged
    assert json.loads((tmp_path / "dp" / "releases.jsonl").read_text().splitlines()[0])["noise_multiplier"] == 2.0
    assert stat.S_IMODE((tmp_path / "dp" / "noise.key").stat().st_mode) == 0o600
    # a restarted party keeps its key, so its retries still match; another party draws other noise
    assert Stage1Privacy(tmp_path, settings).round_key(1, "digest-1") == first
    assert Stage1Privacy(tmp_path / "other", settings).round_key(1, "digest-1") != first


def test_a_damaged_noise_key_is_refused(tmp_path: Path):
    (tmp_path / "dp").mkdir()
    (tmp_path / "dp" / "noise.key").write_bytes(b"short")
    with pytest.raises(ValueError, match="DP noise key has 32 bytes"):
        Stage1Privacy(tmp_path, DPSettings(clip=1.0, noise_multiplier=1.0, delta=1e-5))
