"""A Flower app's evaluate replies → the counts of a Starfish evaluation answer
(docs/FLOWER.md, "Federated evaluation"; docs/JOBS.md §7, step 2).

Flower's convention: an evaluate function replies with one MetricRecord holding the number
of examples it scored (``num-examples``) and its accuracy on them (``accuracy``, a fraction
in [0, 1]; the mod can be told another metric name). `StarfishMod` runs the app's evaluate
function once at M̂ and once at M_T on the client's own held-out data and answers the task
with the integer counts

    correct_new = round(accuracy(M̂)·n),  correct_old = round(accuracy(M_T)·n),  total = n

(`client_sdk.evaluation.EvalCounts`). With an operator's probe (config ``starfish-probe``)
the app may add the integer counts ``probe-hits`` and ``probe-total`` to both replies;
without them the probe counts are 0. A reply that breaks the convention is refused with a
ValueError naming the model and the missing or bad metric; nothing is sent.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from flwr.app import Message

from client_sdk.evaluation import EvalCounts

ACCURACY = "accuracy"  #: default metric: the fraction of the examples scored correctly
WEIGHT = "num-examples"  #: the number of examples scored
PROBE_HITS, PROBE_TOTAL = "probe-hits", "probe-total"  #: optional probe counts


@dataclass(frozen=True)
class Scored:
    """One model's score on the client's held-out data, as counts."""

    correct: int
    total: int
    probe_hits: int = 0
    probe_total: int = 0


def reply_metrics(reply: Message, model: str) -> Mapping:
    """The single MetricRecord of the app's evaluate reply for `model` (ValueError otherwise)."""
    if reply.has_error():
        raise ValueError(f"the app's evaluate function failed on {model}: {reply.error.reason}")
    records = reply.content.metric_records
    if len(records) != 1:
        raise ValueError(f"the app's evaluate reply for {model} must hold one MetricRecord, found {len(records)}")
    return next(iter(records.values()))


def _number(metrics: Mapping, key: str, model: str) -> float:
    if key not in metrics:
        raise ValueError(f"the app's evaluate reply for {model} lacks the metric {key!r} (have {sorted(metrics)})")
    value = metrics[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"the app's evaluate metric {key!r} for {model} must be a finite number, got {value!r}")
    return float(value)


def _count(metrics: Mapping, key: str, model: str) -> int:
    value = _number(metrics, key, model)
    if value != int(value) or value < 0:
        raise ValueError(f"the app's evaluate metric {key!r} for {model} must be a count (integer ≥ 0), got {value}")
    return int(value)


def scored(metrics: Mapping, model: str, accuracy_key: str = ACCURACY, weight_key: str = WEIGHT) -> Scored:
    """correct = round(accuracy·n), total = n, and the probe counts if the app gave both."""
    n = _count(metrics, weight_key, model)
    if n < 1:
        raise ValueError(f"the app's evaluate reply for {model} scored no example ({weight_key!r} = 0)")
    accuracy = _number(metrics, accuracy_key, model)
    if not 0.0 <= accuracy <= 1.0:
        raise ValueError(f"the app's evaluate metric {accuracy_key!r} for {model} must be in [0, 1], got {accuracy}")
    given = [k for k in (PROBE_HITS, PROBE_TOTAL) if k in metrics]
    if len(given) == 1:
        raise ValueError(f"the app's evaluate reply for {model} has {given[0]!r} without its pair")
    if not given:
        return Scored(round(accuracy * n), n)
    hits, total = _count(metrics, PROBE_HITS, model), _count(metrics, PROBE_TOTAL, model)
    if hits > total:
        raise ValueError(f"the app's evaluate reply for {model} has {PROBE_HITS!r} {hits} > {PROBE_TOTAL!r} {total}")
    return Scored(round(accuracy * n), n, hits, total)


def eval_counts(new: Mapping, old: Mapping, accuracy_key: str = ACCURACY, weight_key: str = WEIGHT) -> EvalCounts:
    """The answer's counts from the app's metrics at M̂ (`new`) and M_T (`old`): both must
    score the same examples (the same n and probe total)."""
    a = scored(new, "M̂ (the unlearned model)", accuracy_key, weight_key)
    b = scored(old, "M_T (the replaced model)", accuracy_key, weight_key)
    if (a.total, a.probe_total) != (b.total, b.probe_total):
        raise ValueError(
            f"the app scored M̂ and M_T on different data: {weight_key!r} {a.total} vs {b.total}, "
            f"{PROBE_TOTAL!r} {a.probe_total} vs {b.probe_total}"
        )
    return EvalCounts(a.correct, b.correct, a.total, a.probe_hits, b.probe_hits, a.probe_total)


def within_bound(counts: EvalCounts, max_eval_samples: int) -> EvalCounts:
    """`counts`, if its totals are at most the operator's N (`[evaluation] max_eval_samples`,
    the task's bound on every count); else a ValueError before anything is sent."""
    for what, total in (("'num-examples'", counts.total), ("'probe-total'", counts.probe_total)):
        if total > max_eval_samples:
            raise ValueError(
                f"the app scored {total} examples ({what}), above the operator's bound N = {max_eval_samples}: "
                "evaluate on at most N examples"
            )
    return counts
