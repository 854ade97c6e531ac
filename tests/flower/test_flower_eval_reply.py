"""The Flower evaluate convention → the counts of a Starfish evaluation answer
(starfish_flower.eval_reply): correct = round(accuracy·n), total = n, probe counts when the
app gives both; every reply that breaks the convention is refused with a clear error."""

from __future__ import annotations

import math
import time

import pytest
from flwr.app import Error, Message, MessageType, Metadata, MetricRecord, RecordDict
from hypothesis import assume, given
from hypothesis import strategies as st

from client_sdk.evaluation import EvalCounts, answer_shares
from starfish_flower.eval_reply import eval_counts, reply_metrics, scored, within_bound


def _reply(content: RecordDict | Error) -> Message:
    metadata = Metadata(1, "m1", 0, 7, "", "", time.time(), 3600.0, MessageType.EVALUATE)  # as the node receives it
    return Message(content, reply_to=Message(content=RecordDict(), metadata=metadata))


@given(n=st.integers(1, 100_000), accuracy=st.floats(0.0, 1.0), old=st.floats(0.0, 1.0))
def test_counts_are_the_accuracies_times_n_rounded(n, accuracy, old):
    counts = eval_counts({"num-examples": n, "accuracy": accuracy}, {"num-examples": n, "accuracy": old})
    assert counts.total == n and (counts.probe_new, counts.probe_old, counts.probe_total) == (0, 0, 0)
    for correct, a in ((counts.correct_new, accuracy), (counts.correct_old, old)):
        assert 0 <= correct <= n
        assert abs(correct / n - a) <= 0.5 / n + 1e-12
    answer_shares(counts, 100_000)  # a valid answer: the SDK accepts it


@given(n=st.integers(1, 1000), hits=st.integers(0, 1000), total=st.integers(0, 1000))
def test_probe_counts_pass_through_when_the_app_gives_both(n, hits, total):
    assume(hits <= total)
    new = {"num-examples": n, "accuracy": 0.5, "probe-hits": hits, "probe-total": total}
    old = {"num-examples": n, "accuracy": 1.0, "probe-hits": 0, "probe-total": total}
    assert eval_counts(new, old) == EvalCounts(round(0.5 * n), n, n, hits, 0, total)


def test_another_accuracy_metric_name_can_be_configured():
    counts = eval_counts({"n": 10, "acc": 0.3}, {"n": 10, "acc": 0.9}, accuracy_key="acc", weight_key="n")
    assert (counts.correct_new, counts.correct_old, counts.total) == (3, 9, 10)


@pytest.mark.parametrize(
    ("metrics", "named"),
    [
        ({"accuracy": 0.5}, "lacks the metric 'num-examples'"),
        ({"num-examples": 10}, "lacks the metric 'accuracy'"),
        ({"num-examples": 10, "loss": 0.1}, "lacks the metric 'accuracy'"),
        ({"num-examples": 0, "accuracy": 0.5}, "scored no example"),
        ({"num-examples": 2.5, "accuracy": 0.5}, "must be a count"),
        ({"num-examples": -3, "accuracy": 0.5}, "must be a count"),
        ({"num-examples": 10, "accuracy": 1.5}, "must be in [0, 1]"),
        ({"num-examples": 10, "accuracy": -0.1}, "must be in [0, 1]"),
        ({"num-examples": 10, "accuracy": math.nan}, "must be a finite number"),
        ({"num-examples": 10, "accuracy": [0.5, 0.5]}, "must be a finite number"),
        ({"num-examples": 10, "accuracy": 0.5, "probe-hits": 3}, "'probe-hits' without its pair"),
        ({"num-examples": 10, "accuracy": 0.5, "probe-hits": 4, "probe-total": 3}, "'probe-hits' 4 > 'probe-total' 3"),
    ],
)
def test_a_reply_that_breaks_the_convention_is_refused_naming_the_metric(metrics, named):
    with pytest.raises(ValueError, match="M̂") as refused:
        eval_counts(metrics, {"num-examples": 10, "accuracy": 0.5})
    assert named in str(refused.value)


def test_the_two_models_must_be_scored_on_the_same_examples():
    with pytest.raises(ValueError, match="different data: 'num-examples' 10 vs 12"):
        eval_counts({"num-examples": 10, "accuracy": 0.5}, {"num-examples": 12, "accuracy": 0.5})


def test_the_reply_must_be_one_metric_record_and_no_error():
    good = MetricRecord({"num-examples": 4, "accuracy": 0.25})
    assert scored(reply_metrics(_reply(RecordDict({"metrics": good})), "M̂"), "M̂").correct == 1
    with pytest.raises(ValueError, match="must hold one MetricRecord, found 0"):
        reply_metrics(_reply(RecordDict()), "M_T")
    two = RecordDict({"a": good, "b": MetricRecord({"loss": 0.1})})
    with pytest.raises(ValueError, match="found 2"):
        reply_metrics(_reply(two), "M_T")
    with pytest.raises(ValueError, match="evaluate function failed on M_T: boom"):
        reply_metrics(_reply(Error(0, "boom")), "M_T")


def test_totals_above_the_operators_bound_are_refused_before_sending():
    counts = EvalCounts(5, 6, 10, 1, 2, 4)
    assert within_bound(counts, 10) is counts
    with pytest.raises(ValueError, match=r"scored 10 examples \('num-examples'\), above the operator's bound N = 9"):
        within_bound(counts, 9)
    with pytest.raises(ValueError, match="'probe-total'"):
        within_bound(EvalCounts(1, 1, 3, 0, 0, 12), 10)
