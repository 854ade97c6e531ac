"""`starfish simulate` end to end on digits (tiny model, few rounds)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from starfish.cli import main

BASE = ["simulate", "--dataset", "digits", "--clients", "5", "--rounds", "4", "--lr", "0.5", "--local-epochs", "1",
        "--batch-size", "32", "--seed", "1", "--no-progress"]


def test_single_strategy_writes_every_metric_to_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run.json"
    assert main(BASE + ["--strategy", "retrain", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["config"]["dataset"] == "digits" and doc["config"]["architecture"] == "digits_mlp"
    assert [c["round"] for c in doc["training"]["curve"]] == [1, 2, 3, 4]
    (run,) = doc["runs"]
    assert run["strategy"] == "retrain" and run["backend"] == "plain"
    for key in ("ter", "ba_asr", "mia_asr", "mia_test_rate"):
        assert 0.0 <= run["metrics"][key] <= 1.0
    # retraining through the oracle is the exact retrain reference and asks everyone every round
    assert run["gap_to_retrain"]["l2"] == 0.0
    assert run["metrics"] == {k: doc["retrain_reference"][k] for k in run["metrics"]}
    assert run["arp_percent"] == 0.0 and set(run["client_rounds"].values()) == {4}
    assert run["seconds"] > 0 and "| retrain |" in capsys.readouterr().out


def test_compare_writes_table_figure_and_starfish_details(tmp_path: Path) -> None:
    out = tmp_path / "cmp.json"
    args = BASE + ["--compare", "starfish,retrain", "--param", "starfish:sigma=0.75", "--out", str(tmp_path), "--json", str(out)]
    assert main(args) == 0
    doc = json.loads(out.read_text())
    starfish = doc["runs"][0]
    assert starfish["strategy"] == "starfish" and starfish["params"] == {"sigma": 0.75}
    assert len(starfish["selected_rounds"]) == 3  # ⌈0.75·4⌉
    assert set(starfish["selected_rounds"]) <= {1, 2, 3, 4}
    assert "theorem1" in starfish["report"] and isinstance(starfish["flags"], list)
    table = (tmp_path / "compare.md").read_text()
    assert "| starfish |" in table and "| retrain |" in table and "before unlearning" in table
    assert (tmp_path / "compare.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--strategy", "nope"], "unknown strategy 'nope'"),
        (["--compare", "starfish,retrain", "--param", "sigma=0.5"], "prefix the name with a strategy"),
        (["--strategy", "retrain", "--param", "starfish:sigma=0.5"], "'starfish' is not being run"),
        (["--strategy", "retrain", "--targets", "0"], "at least one target"),
    ],
)
def test_bad_input_is_a_clear_error(extra: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(BASE + extra) == 1
    assert message in capsys.readouterr().err
