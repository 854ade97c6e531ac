"""Shared baseline helpers: parameter parsing, selection by fraction, oracle answers, ARP."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from privacy.adaptive import budget_schedule
from unlearning.baselines.common import RunLog, loss_windows, top_fraction
from unlearning.baselines.retrain import RetrainStrategy
from unlearning.strategy import UnlearningError
from unlearning.strategy_params import StrategyParams, parse_params


@dataclass(frozen=True)
class Example(StrategyParams):
    count: int = 1
    rate: float = 0.5
    flag: bool = False
    label: str = "x"
    limit: float | None = None


def test_parse_params_types_and_defaults():
    parsed = parse_params(Example, {"count": 3, "rate": 1, "flag": True, "limit": None}, "demo")
    assert parsed == Example(count=3, rate=1.0, flag=True, label="x", limit=None)
    assert isinstance(parsed.rate, float)


@pytest.mark.parametrize(
    "raw,message",
    [
        ({"count": True}, "'count' must be int"),
        ({"count": 1.0}, "'count' must be int"),
        ({"rate": "0.5"}, "'rate' must be float"),
        ({"rate": float("inf")}, "must be finite"),
        ({"flag": 1}, "'flag' must be bool"),
        ({"label": None}, "'label' must be str"),
        ({"colour": "red"}, "unknown parameter"),
    ],
)
def test_parse_params_rejects_bad_values(raw, message):
    with pytest.raises(UnlearningError, match=message):
        parse_params(Example, raw, "demo")


def test_top_fraction_rounds_up_keeps_order_and_breaks_ties_by_position():
    scores = {"a": 0.1, "b": 0.9, "c": 0.5, "d": 0.9}
    assert top_fraction(scores, 0.3) == ["b", "d"]  # ⌈0.3·4⌉ = 2
    assert top_fraction(scores, 0.75) == ["b", "c", "d"]  # returned in the mapping's order
    assert top_fraction(scores, 0.25) == ["b"]  # tie between b and d: the earlier key
    assert top_fraction(scores, 0.25, largest=False) == ["a"]
    assert top_fraction(scores, 0.01) == ["b"]  # at least one
    assert top_fraction({}, 0.5) == []


def test_oracle_answers_of_the_wrong_shape_are_rejected(logreg_fl):
    class Truncating(type(logreg_fl.oracle)):
        def exact_gradients(self, backend, request):
            return {c: backend.share(torch.zeros(3)) for c in request.clients}

    logreg_fl.oracle = Truncating(logreg_fl.problem)
    with pytest.raises(UnlearningError, match="shape"):
        RetrainStrategy().run(logreg_fl.context())


def test_runlog_counts_distinct_rounds_per_client(logreg_fl):
    ctx = logreg_fl.context(targets=("c0",))
    log = RunLog(ctx, "demo")
    model = logreg_fl.history.model(0)
    log.fresh_gradients(model, 1, 1, ["c1", "c2"], "test")
    log.fresh_gradients(model, 1, 1, ["c1"], "test")  # same round again: still one round
    log.fresh_gradients(model, 2, 2, ["c1", "c0"], "test")
    assert {c: len(r) for c, r in log.rounds_asked.items()} == {"c1": 2, "c2": 1, "c3": 0, "c4": 0}
    assert {c: len(r) for c, r in log.target_rounds.items()} == {"c0": 1}
    assert log.arp() == pytest.approx(100 * ((6 + 7 + 8 + 8) / 8) / 4)


finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(st.lists(finite, min_size=1, max_size=30), st.floats(min_value=0.01, max_value=1.0), st.booleans())
def test_top_fraction_picks_the_extreme_ceil_fraction(values, fraction, largest):
    scores = {f"k{i}": v for i, v in enumerate(values)}
    chosen = top_fraction(scores, fraction, largest=largest)
    count = len(chosen)
    assert count == len(set(chosen)) and 1 <= count <= len(values)
    assert count >= fraction * len(values) - 1e-6 and count - 1 < max(1.0, fraction * len(values))  # ⌈f·n⌉
    rest = [scores[k] for k in scores if k not in chosen]
    if rest:
        edge = min(scores[k] for k in chosen) if largest else max(scores[k] for k in chosen)
        assert all((edge >= r) if largest else (edge <= r) for r in rest)
    assert chosen == [k for k in scores if k in chosen]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.floats(min_value=0.0, max_value=10.0), min_size=2, max_size=40),
    st.floats(min_value=0.01, max_value=0.99),
)
def test_loss_windows_partition_the_rounds_in_order(losses, rate):
    windows = loss_windows(losses, rate)
    assert [i for w in windows for i in w] == list(range(1, len(losses)))
    prev = losses[0]
    for w in windows[:-1]:
        assert losses[w[-1]] <= (1 - rate) * prev  # every closed window reached the reduction
        assert all(losses[i] > (1 - rate) * prev for i in w[:-1])
        prev = losses[w[-1]]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.floats(min_value=0.0, max_value=5.0), min_size=2, max_size=40),
    st.floats(min_value=0.1, max_value=2.0),
    st.floats(min_value=0.0, max_value=3.0),
)
def test_budget_schedule_is_bounded_and_non_decreasing(losses, eps_min, span):
    eps_max = eps_min + span
    budgets = budget_schedule(losses, eps_min, eps_min, eps_max)
    assert len(budgets) == len(losses) - 1
    assert all(eps_min <= b <= eps_max + 1e-12 for b in budgets)
    assert all(b2 >= b1 - 1e-12 for b1, b2 in zip(budgets, budgets[1:], strict=False))
