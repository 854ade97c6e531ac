"""Starfish's recovery rounds: exact FedAvg rounds with the remaining clients after the
replay, each asked as a task of reason "recovery" and counted in the clients' rounds."""

from __future__ import annotations

import pytest
import torch

from mpc.plain_backend import PlainBackend
from unlearning.errors import UnlearningError
from unlearning.starfish import StarfishParams, StarfishStrategy
from unlearning.starfish.recovery import recovery_schedule
from unlearning.strategy import UnlearnContext

from helpers.synthetic_fl import LogRegFL, LogRegOracle

ROUNDS, LR = 10, 0.5
BASE = {"sigma": 0.6, "beta": 0.2, "recovery_rounds": 0}


def run(params: dict, silent: frozenset[str] = frozenset()):
    backend = PlainBackend()
    problem = LogRegFL.make(seed=3)
    oracle = LogRegOracle(problem, silent=silent)
    history = problem.history(backend, rounds=ROUNDS, lr=LR)
    ctx = UnlearnContext(backend=backend, history=history, oracle=oracle, targets=("c0",), params=params)
    return problem, oracle, StarfishStrategy().run(ctx)


def test_schedule_takes_the_skipped_rounds_first_then_the_replayed_ones_cyclically() -> None:
    assert recovery_schedule([1, 2, 4], 5, 2) == [3, 5]
    assert recovery_schedule([1, 2, 4], 5, 7) == [3, 5, 1, 2, 4, 3, 5]
    assert recovery_schedule([1, 2, 3], 3, 2) == [1, 2]
    assert recovery_schedule([2], 3, 0) == []


def test_negative_recovery_rounds_are_refused() -> None:
    with pytest.raises(UnlearningError, match="recovery_rounds"):
        StarfishStrategy.parse_params({"recovery_rounds": -1})
    assert StarfishParams().recovery_rounds == 1  # the default: one recovery round after the replay


def test_recovery_rounds_are_exact_fedavg_steps_counted_per_client() -> None:
    problem, _, plain = run(BASE)
    _, oracle, recovered = run({**BASE, "recovery_rounds": 2})
    report = recovered.report
    remaining = [c for c in problem.clients if c != "c0"]
    schedule = recovery_schedule(report["selection"]["selected_rounds"], ROUNDS, 2)
    assert report["recovery"] == {"rounds": 2, "data_orders": schedule}
    asks = [r for r in oracle.requests if r.reason == "recovery"]
    assert [(r.unlearning_round, r.original_round, r.clients) for r in asks] == [
        (7, schedule[0], tuple(remaining)),
        (8, schedule[1], tuple(remaining)),
    ]
    for c in remaining:
        assert report["asked_rounds"][c] == plain.report["asked_rounds"][c] + 2
    assert report["arp_percent"] == pytest.approx(plain.report["arp_percent"] - 2 * 100 / ROUNDS)
    # two plain FedAvg steps from the replay's model, with the remaining clients' weights
    expected = problem.fedavg(2, LR, remaining, start=plain.model)[-1]
    assert torch.allclose(recovered.model.double(), expected.double(), atol=1e-6)
    # and they move the model towards retraining without c0
    retrain = problem.fedavg(ROUNDS, LR, remaining)[-1].double()
    assert (recovered.model.double() - retrain).norm() < (plain.model.double() - retrain).norm()


def test_a_silent_client_is_left_out_of_the_recovery_average() -> None:
    problem, _, out = run({**BASE, "recovery_rounds": 1}, silent=frozenset({"c2"}))
    events = [e for e in out.report["corrections"]["events"] if e["reason"] == "recovery"]
    assert events and events[0]["missing"] == ["c2"]
    answered = [c for c in problem.clients if c not in ("c0", "c2")]
    entry = out.report["rounds"][-1]
    assert entry["kind"] == "recovery" and entry["participants"] == len(answered)


def test_a_recovery_round_without_any_answer_is_skipped() -> None:
    everyone = frozenset(c for c in LogRegFL.make(seed=3).clients if c != "c0")
    _, _, out = run({**BASE, "recovery_rounds": 1}, silent=everyone)
    assert out.report["rounds"][-1]["kind"] == "skipped"
