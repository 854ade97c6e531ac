"""The forgotten client's local self-check: the unlearned model M̂ against the model it replaced M_T.

    check = self_check(client, evaluate, statement=cert.statement)   # or replaced_round=T, unlearned_round=T + 1
    print("\\n".join(check.lines()))

A client that asked to be forgotten (or its developer) downloads both public models with
`Client.fetch_model` (both parties must serve the same content hash; an erased client may
still download models) and scores each with its own callback `evaluate(params) -> {metric:
value}` on its own data: nothing about the data leaves the client. Given the statement of
the job's erasure certificate (`client_sdk.evidence`), the rounds come from it and each
downloaded model must have the hash the statement names. `SelfCheck.difference` is
metric(M̂) − metric(M_T) for every metric: when the client's data was influential (e.g.
mislabelled or backdoored), its accuracy on that data drops and its loss rises.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from client_sdk.client import Client, GlobalModel
from client_sdk.errors import ModelMismatchError, StarfishError

Evaluate = Callable[[np.ndarray], Mapping[str, float]]


@dataclass(frozen=True)
class ModelScore:
    """One model, named by its global round and content hash, with the client's metrics for it."""

    round: int
    hash: str
    metrics: dict[str, float]


@dataclass(frozen=True)
class SelfCheck:
    replaced: ModelScore  #: M_T, the model in service before the job
    unlearned: ModelScore  #: M̂, the job's unlearned model (global model T+1)

    @property
    def difference(self) -> dict[str, float]:
        """metric(M̂) − metric(M_T), per metric."""
        return {k: self.unlearned.metrics[k] - self.replaced.metrics[k] for k in self.replaced.metrics}

    def lines(self) -> list[str]:
        """A small table a person reads: one line per metric."""
        r, u = self.replaced, self.unlearned
        out = [
            f"self-check on this client's own data: unlearned model {u.round} ({u.hash[:12]}) "
            f"against the model it replaced {r.round} ({r.hash[:12]})"
        ]
        for k, d in self.difference.items():
            out.append(f"  {k}: {r.metrics[k]:.4f} -> {u.metrics[k]:.4f} (difference {d:+.4f})")
        return out


def _metrics(evaluate: Evaluate, model: GlobalModel) -> dict[str, float]:
    """The callback's metrics for `model`, checked: a non-empty mapping of names to finite numbers."""
    raw = evaluate(np.array(model.params, dtype=np.float32))
    if not isinstance(raw, Mapping) or not raw:
        raise StarfishError(f"evaluate must return a non-empty mapping of metric names to numbers, got {raw!r}")
    out = {}
    for name, value in raw.items():
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise StarfishError(f"evaluate returned {name!r} = {value!r}: not a number") from None
        if not math.isfinite(number):
            raise StarfishError(f"evaluate returned {name!r} = {number}: not finite")
        out[str(name)] = number
    return out


def _certified_rounds(statement: Mapping[str, Any]) -> list[tuple[int, str]]:
    """(global round, hash) of the replaced and of the unlearned model a certificate statement names."""
    try:
        models = statement["models"]
        return [(int(models[k]["global_round"]), str(models[k]["hash"])) for k in ("replaced", "unlearned")]
    except (KeyError, TypeError, ValueError):
        raise StarfishError("the statement names no replaced and unlearned model (is it a certificate's?)") from None


def _fetch(client: Client, round_index: int, expected: str | None) -> GlobalModel:
    model = client.fetch_model(round_index)
    if expected is not None and model.hash != expected:
        raise ModelMismatchError(
            f"the parties serve model {model.hash[:12]} as global model {round_index}, "
            f"the certificate names {expected[:12]}"
        )
    return model


def self_check(
    client: Client,
    evaluate: Evaluate,
    statement: Mapping[str, Any] | None = None,
    replaced_round: int | None = None,
    unlearned_round: int | None = None,
) -> SelfCheck:
    """Score M_T and M̂ with `evaluate`: rounds from a certificate `statement`, or given explicitly."""
    if statement is not None:
        (replaced_round, replaced_hash), (unlearned_round, unlearned_hash) = _certified_rounds(statement)
        expected = {replaced_round: replaced_hash, unlearned_round: unlearned_hash}
    elif replaced_round is None or unlearned_round is None:
        raise StarfishError("give a certificate statement, or both replaced_round and unlearned_round")
    else:
        expected = {}
    if not 0 <= replaced_round < unlearned_round:
        raise StarfishError(f"the unlearned model ({unlearned_round}) must come after the replaced ({replaced_round})")
    scores = []
    for r in (replaced_round, unlearned_round):
        model = _fetch(client, r, expected.get(r))
        scores.append(ModelScore(model.round, model.hash, _metrics(evaluate, model)))
    if scores[0].metrics.keys() != scores[1].metrics.keys():
        raise StarfishError(
            f"evaluate returned other metrics for the two models: {sorted(scores[0].metrics)} "
            f"and {sorted(scores[1].metrics)}"
        )
    return SelfCheck(replaced=scores[0], unlearned=scores[1])
