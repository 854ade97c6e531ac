"""Retrain from scratch equals an independent FedAvg without the target."""

from __future__ import annotations

import pytest
import torch

from unlearning.baselines.retrain import RetrainStrategy
from unlearning.strategy import UnlearningError


def test_retrain_equals_independent_fedavg_without_target(logreg_fl):
    result = RetrainStrategy().run(logreg_fl.context(targets=("c0",)))
    remaining = [c for c in logreg_fl.problem.clients if c != "c0"]
    expected = logreg_fl.problem.fedavg(rounds=8, lr=0.5, clients=remaining)[-1]
    torch.testing.assert_close(result.model, expected, rtol=1e-6, atol=1e-7)
    assert not torch.allclose(result.model, logreg_fl.history.model(8), atol=1e-3)
    report = result.report
    assert report["rounds_used"] == 8
    assert report["client_rounds"] == dict.fromkeys(remaining, 8)
    assert report["arp"] == 0.0
    assert report["target_rounds"] == {"c0": 0}
    assert all(r.clients == tuple(remaining) for r in logreg_fl.oracle.requests)
    assert [r.original_round for r in logreg_fl.oracle.requests] == list(range(1, 9))


def test_retrain_several_targets_and_fewer_rounds(logreg_fl):
    result = RetrainStrategy().run(logreg_fl.context(targets=("c0", "c3"), params={"rounds": 3}))
    expected = logreg_fl.problem.fedavg(rounds=3, lr=0.5, clients=["c1", "c2", "c4"])[-1]
    torch.testing.assert_close(result.model, expected, rtol=1e-6, atol=1e-7)
    assert result.report["arp"] == pytest.approx(100 * 5 / 8)


def test_retrain_skips_a_silent_client_and_reports_it(logreg_fl):
    logreg_fl.oracle.silent = frozenset({"c2"})
    result = RetrainStrategy().run(logreg_fl.context(params={"rounds": 2}))
    expected = logreg_fl.problem.fedavg(rounds=2, lr=0.5, clients=["c1", "c3", "c4"])[-1]
    torch.testing.assert_close(result.model, expected, rtol=1e-6, atol=1e-7)
    assert [m["client"] for m in result.report["missing_answers"]] == ["c2", "c2"]


@pytest.mark.parametrize("params", [{"rounds": 0}, {"rounds": 2.5}, {"rounds": "3"}, {"round": 3}])
def test_retrain_rejects_bad_parameters(logreg_fl, params):
    with pytest.raises(UnlearningError):
        RetrainStrategy().run(logreg_fl.context(params=params))
