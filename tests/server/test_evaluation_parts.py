"""The federated evaluation's parts without processes: the `[evaluation]` settings, the
report section's states and sentence, the restart rule (an interrupted evaluation is
recorded as not done, never left running), the cohort rule over principals, and the SDK
refusing malformed counts before anything is sent."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from client_sdk.evaluation import EvalCounts, answer_shares
from server.config import ConfigError, EvaluationConfig, PartyConfig, parse_config
from server.jobs import evaluation_section, evaluation_tasks
from tests.server.test_server_config import BASE


@pytest.mark.parametrize(
    "table, message",
    [
        ({"max_eval_samples": 0}, "evaluation.max_eval_samples must be a positive"),
        ({"max_eval_samples": 1 << 40}, "below 2^40"),
        ({"deadline_s": -1}, "evaluation.deadline_s must be a positive"),
        ({"enabled": "yes"}, "evaluation.enabled must be true or false"),
        ({"probe": 7}, "evaluation.probe must be a string"),
        ({"max_samples": 5}, "unknown key 'max_samples' in [evaluation]"),
    ],
)
def test_bad_evaluation_settings_are_refused_by_name(tmp_path: Path, table: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("^", r"\^")):
        parse_config({**BASE, "evaluation": table}, tmp_path)


def test_evaluation_settings_are_read(tmp_path: Path) -> None:
    cfg = parse_config({**BASE, "evaluation": {"deadline_s": 5, "max_eval_samples": 50, "probe": "class:7"}}, tmp_path)
    assert cfg.evaluation == EvaluationConfig(True, 5.0, 50, "class:7")


def render_summary(report: dict) -> str:
    section = report["federated_evaluation"]
    return f"federated evaluation ({section['state']}): {section['summary']}\n"


@pytest.fixture
def job_dir(tmp_path: Path) -> Path:
    report = {"job": {"job_id": "j0123456789ab", "state": "succeeded"}}
    report["federated_evaluation"] = evaluation_section.initial(True)
    (tmp_path / "report.json").write_text(json.dumps(report))
    return tmp_path


def test_a_restart_records_a_pending_or_running_evaluation_as_not_done(job_dir: Path) -> None:
    assert evaluation_section.read(job_dir)["state"] == "pending"
    assert evaluation_section.interrupted(job_dir, render_summary)
    section = evaluation_section.read(job_dir)
    assert section["state"] == "not_done" and "restarted" in section["summary"]
    assert "federated evaluation (not_done)" in (job_dir / "summary.txt").read_text()
    assert not evaluation_section.interrupted(job_dir, render_summary), "a final state is kept"


def test_the_revealed_section_lists_every_published_value_and_says_it_in_words() -> None:
    base = {"evaluators": {"asked": ["a", "b", "c"], "accepted": ["a", "b", "c"], "refused": [], "missing": []}}
    sums = {"correct_new": 80, "correct_old": 90, "total": 100, "probe_new": 1, "probe_old": 9, "probe_total": 10}
    section = evaluation_section.revealed(base, sums, "class:7")
    assert section["sums"] == sums
    assert (section["accuracy_new"], section["accuracy_old"]) == (0.8, 0.9)
    assert (section["probe_rate_new"], section["probe_rate_old"]) == (0.1, 0.9)
    assert section["summary"].startswith(
        "On 3 remaining clients' own data (100 examples) the new model scores 80.0 % "
        "against 90.0 % for the replaced one."
    )
    status = evaluation_section.to_proto(section)
    assert (status.state, status.accepted, status.accuracy_old) == ("revealed", 3, 0.9)


def test_the_cohort_rule_counts_principals_not_clients(tmp_path: Path) -> None:
    cfg = parse_config(BASE, tmp_path)
    cfg = PartyConfig(**{**cfg.__dict__, "principals": {"a": "org", "b": "org"}})
    assert "not enough evaluators: 2 accepted" in evaluation_tasks.cohort_refusal(cfg, ["a", "b", "c"])
    assert evaluation_tasks.cohort_refusal(cfg, ["a", "c", "d"]) is None


@pytest.mark.parametrize(
    "counts, rule",
    [
        (EvalCounts(11, 0, 10), "correct(M̂) ≤ total"),
        (EvalCounts(0, 0, 101), "total ≤ max_eval_samples"),
        (EvalCounts(0, -1, 10), "correct(M_T) ≥ 0"),
        (EvalCounts(0, 0, 10, 3, 0, 2), "probe_hits(M̂) ≤ probe_total"),
    ],
)
def test_the_sdk_refuses_malformed_counts_before_sending(counts: EvalCounts, rule: str) -> None:
    with pytest.raises(ValueError, match=rule.replace("(", r"\(").replace(")", r"\)")):
        answer_shares(counts, 100)


def test_the_two_shares_add_up_to_the_answer() -> None:
    first, second = answer_shares(EvalCounts(7, 8, 10, 1, 2, 3), 100)
    with np.errstate(over="ignore"):
        assert (first + second)[:6].tolist() == [7, 8, 10, 1, 2, 3]
    assert first.tolist() != second.tolist()
