"""The quality matrix: its summary and goal test, and one quick case measured for real."""

from __future__ import annotations

import pytest

from bench import quality_matrix as qm
from bench import secrs_random as sr


def _row(ter: float, ba: float, arp: float) -> dict[str, float]:
    return {"ter": ter, "ba_asr": ba, "mia_asr": 40.0, "arp": arp, "ter_gap": ter - 10.0, "ba_asr_gap": ba - 0.5}


def test_summary_is_mean_and_std_over_seeds_and_tests_the_goal() -> None:
    runs = {
        "mnist5k/iid": {
            "0": {"good": _row(10.5, 1.0, 75.0), "far": _row(14.0, 0.5, 80.0), "_run": {"wall_s": 1.0}},
            "1": {"good": _row(11.5, 1.0, 75.0), "far": {"failed": "ValueError: x"}, "_run": {"wall_s": 1.0}},
        }
    }
    out = qm.summary(runs)["mnist5k/iid"]
    assert out["good"]["ter_gap"]["mean"] == pytest.approx(1.0)
    assert out["good"]["ter_gap"]["std"] == pytest.approx(0.7071, abs=1e-4)
    assert out["good"]["goal_met"] is True
    assert out["far"]["seeds"] == 1 and out["far"]["failed"] == 1
    assert out["far"]["goal_met"] is False  # TER 4 points above retraining
    assert "_run" not in out


def test_low_arp_misses_the_goal() -> None:
    out = qm.summary({"c": {"0": {"m": _row(10.0, 0.5, 60.0)}}})
    assert out["c"]["m"]["goal_met"] is False


def test_secrs_summary_pairs_each_history_with_its_draws() -> None:
    name = next(iter(sr.SETTINGS))

    def metrics(ter: float) -> dict[str, float]:
        return {"ter": ter, "ba_asr": 1.0, "mia_asr": 40.0}

    runs = {
        "iid": {
            "0": {name: {"secrs": metrics(10.0), "random": [metrics(11.0), metrics(13.0)]}},
            "1": {name: {"secrs": metrics(12.0), "random": [metrics(11.0), metrics(11.0)]}},
        }
    }
    ter = sr.summary(runs)["iid"][name]["ter"]
    assert ter["diff"]["mean"] == pytest.approx(-0.5)  # (10 − 12) and (12 − 11)
    assert ter["secrs_better"] == 1 and ter["secrs_worse"] == 1
    assert ter["random"]["mean"] == pytest.approx(11.5)


def test_quick_case_removes_the_backdoor_and_saves_rounds() -> None:
    rows: dict[str, dict] = {}
    config = qm.case_config("digits", "iid", 0, quick=True)
    qm.run_case(config, list(qm.QUICK_METHODS), lambda label, row: rows.__setitem__(label, row))
    assert set(rows) == {"retrain", "before", *qm.QUICK_METHODS}
    assert rows["before"]["ba_asr"] >= 80.0 and rows["retrain"]["ba_asr"] <= 10.0
    star = rows["starfish"]
    assert star["ba_asr"] <= rows["retrain"]["ba_asr"] + 10.0
    assert star["ter_gap"] == pytest.approx(star["ter"] - rows["retrain"]["ter"])
    assert star["arp"] >= 70.0
