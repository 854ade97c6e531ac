"""The minimum cohort k outside Stage I rounds: the job parameter `min_cohort` (one place,
server.jobs.validation) and the report's `revealed` section with cohorts and ε."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from server.jobs import validation
from server.jobs.job_report import revealed_section
from server.jobs.validation import RequestError, with_min_cohort
from unlearning.strategy_params import StrategyParams


@dataclass(frozen=True)
class WithCohort(StrategyParams):
    sigma: float = 0.5
    min_cohort: int = 2


@dataclass(frozen=True)
class WithoutCohort(StrategyParams):
    sigma: float = 0.5


class _Strategy:
    def __init__(self, params_type):
        self.params_type = params_type


@pytest.fixture
def strategies(monkeypatch):
    from unlearning import registry

    table = {"cohorted": _Strategy(WithCohort), "plain": _Strategy(WithoutCohort)}
    monkeypatch.setattr(registry, "names", lambda: list(table))
    monkeypatch.setattr(registry, "strategy_class", lambda name: table[name])
    return validation


def test_min_cohort_is_passed_only_to_strategies_that_declare_it(strategies):
    assert with_min_cohort("cohorted", {"sigma": 0.4}, 3) == {"sigma": 0.4, "min_cohort": 3}
    assert with_min_cohort("cohorted", {"min_cohort": 5}, 3) == {"min_cohort": 5}  # stricter: kept
    assert with_min_cohort("plain", {"sigma": 0.4}, 3) == {"sigma": 0.4}  # no such parameter: unchanged
    with pytest.raises(RequestError, match=r"min_cohort = 2 is below this party's minimum cohort 3") as info:
        with_min_cohort("cohorted", {"min_cohort": 2}, 3)
    assert info.value.kind == "invalid"


STARFISH_REVEALED = {
    "selected_rounds": {"count": 2, "values": [1, 3], "why": "top-T′ payload of SecRS"},
    "aggregate_gradients": {"count": 2, "why": "Ĝ_t per unlearning round"},
    "correction_flags": {"count": 4, "why": "one SecTC flag per remaining client and check round"},
    "secmi_masked_products": {"count": 0, "why": "N = K·R"},
}
ROUNDS = [
    {"t": 1, "round": 1, "participants": 4, "kind": "warmup", "eta_u": 1.0},
    {"t": 2, "round": 2, "participants": 0, "kind": "skipped"},
    {"t": 3, "round": 3, "participants": 3, "kind": "estimate", "eta_u": 1.0},
]


def test_revealed_section_lists_every_published_value_with_cohort_and_epsilon():
    report = {"revealed": STARFISH_REVEALED, "rounds": ROUNDS}
    out = revealed_section(report, {1: 5, 2: 3, 3: 4}, remaining=4, targets=1)
    assert all(entry["epsilon"] is None for entry in out.values())  # no DP noise
    assert out["selected_rounds"]["cohort"] == 5 and out["selected_rounds"]["values"] == [1, 3]
    assert out["correction_flags"]["cohort"] == 1  # a bit about one client
    assert out["secmi_masked_products"]["cohort"] == 4
    agg = out["aggregate_gradients"]
    assert agg["published"] == [
        {"t": 1, "round": 1, "cohort": 4, "epsilon": None},
        {"t": 3, "round": 3, "cohort": 3, "epsilon": None},
    ]
    assert agg["cohort"] == 3
    assert out["stage1_models"]["cohort"] == 3 and [p["round"] for p in out["stage1_models"]["published"]] == [1, 2, 3]
    assert (out["unlearned_model"]["count"], out["unlearned_model"]["cohort"]) == (1, 4)


def test_revealed_section_keeps_values_the_strategy_states_and_unknown_kinds():
    rounds = [{"t": 1, "round": 1, "participants": 4, "cohort": 6, "kind": "estimate", "revealed": True}]
    rounds.append({"t": 2, "round": 2, "participants": 2, "kind": "estimate", "revealed": False})  # kept secret
    report = {
        "revealed": {"aggregate_gradients": {"count": 1}, "novel": {"count": 1, "epsilon": 0.5}},
        "rounds": rounds,
    }
    out = revealed_section(report, {}, remaining=6, targets=1)
    assert out["aggregate_gradients"]["published"] == [{"t": 1, "round": 1, "cohort": 6, "epsilon": None}]
    assert out["novel"]["cohort"] is None and out["novel"]["epsilon"] == 0.5
    listed = revealed_section({"revealed": ["the rollback index j*"]}, {}, remaining=3, targets=1)
    assert listed["value_0"] == {"why": "the rollback index j*", "cohort": None, "epsilon": None}


def test_a_job_that_revealed_no_update_carries_a_notice() -> None:
    from server.jobs.job_report import release_notice

    held = {"min_cohort": 3, "revealed_updates": 0, "excluded_steps": [4], "dropped_steps": [1, 2, 3]}
    notice = release_notice({"release": held})
    assert notice is not None and "initial model M_0" in notice and "dropped steps [1, 2, 3]" in notice
    assert release_notice({"release": {**held, "revealed_updates": 2}}) is None
    assert release_notice({"strategy": "retrain"}) is None  # no release rule: nothing to say
