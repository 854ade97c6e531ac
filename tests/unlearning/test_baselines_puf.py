"""PUF: negated pseudo-gradients of the target (Special and Regular), then recovery."""

from __future__ import annotations

import pytest
import torch

from unlearning.baselines.puf import PUFStrategy
from unlearning.strategy import UnlearningError


def test_puf_special_applies_eq9_and_moves_away_from_the_target_data(logreg_fl):
    problem, m_t = logreg_fl.problem, logreg_fl.history.model(8)
    result = PUFStrategy().run(logreg_fl.context(params={"mode": "special", "recovery_rounds": 0}))
    # w_ū = w_t − η_u Δ^−, Δ^− = −η_l g^target (single target)
    expected = (m_t.double() + 2.0 * 0.5 * problem.gradient("c0", m_t)).float()
    torch.testing.assert_close(result.model, expected)
    assert problem.loss("c0", result.model) > problem.loss("c0", m_t) + 0.05
    assert result.report["target_rounds"] == {"c0": 1}
    assert result.report["client_rounds"] == dict.fromkeys(["c1", "c2", "c3", "c4"], 0)
    assert result.report["arp"] == 100.0


def test_puf_regular_combines_remaining_and_negated_target_updates(logreg_fl):
    problem, m_t = logreg_fl.problem, logreg_fl.history.model(8)
    params = {"mode": "regular", "eta_u": 3.0, "eta_r": 1.0, "recovery_rounds": 0}
    result = PUFStrategy().run(logreg_fl.context(params=params))
    n = sum(problem.n(c) for c in problem.clients)
    delta = sum(-0.5 * problem.n(c) / n * problem.gradient(c, m_t) for c in ["c1", "c2", "c3", "c4"])
    delta = delta - 3.0 * (-0.5 * problem.n("c0") / n * problem.gradient("c0", m_t))
    torch.testing.assert_close(result.model, (m_t.double() + delta).float())
    assert result.report["regular_round_clients"] == ["c1", "c2", "c3", "c4"]


def test_puf_recovery_rounds_are_fedavg_over_remaining_clients(logreg_fl):
    special = PUFStrategy().run(logreg_fl.context(params={"recovery_rounds": 0})).model
    recovered = PUFStrategy().run(logreg_fl.context(params={"recovery_rounds": 3}))
    expected = logreg_fl.problem.fedavg(3, 0.5, clients=["c1", "c2", "c3", "c4"], start=special)[-1]
    torch.testing.assert_close(recovered.model, expected)
    assert recovered.report["rounds_used"] == 4
    assert recovered.report["arp"] == pytest.approx(100 * 5 / 8)


def test_puf_regular_fraction_draws_a_seeded_subset(logreg_fl):
    params = {"mode": "regular", "regular_fraction": 0.5, "recovery_rounds": 0, "seed": 7}
    first = PUFStrategy().run(logreg_fl.context(params=params)).report["regular_round_clients"]
    second = PUFStrategy().run(logreg_fl.context(params=params)).report["regular_round_clients"]
    assert first == second and len(first) == 2 and "c0" not in first


def test_eta_u_zero_is_the_natural_baseline_recovery_only(logreg_fl):
    natural = PUFStrategy().run(logreg_fl.context(params={"eta_u": 0.0, "recovery_rounds": 2}))
    assert all("c0" not in r.clients for r in logreg_fl.oracle.requests)
    expected = logreg_fl.problem.fedavg(2, 0.5, clients=["c1", "c2", "c3", "c4"], start=logreg_fl.history.model(8))
    torch.testing.assert_close(natural.model, expected[-1])
    assert natural.report["rounds_used"] == 2 and natural.report["target_rounds"] == {"c0": 0}


def test_rounds_after_t_ask_for_fresh_orders_and_the_targets_for_e_u_epochs(logreg_fl):
    params = {"mode": "regular", "unlearning_epochs": 3, "recovery_rounds": 2}
    PUFStrategy().run(logreg_fl.context(params=params))
    requests = logreg_fl.oracle.requests
    assert all(r.fresh_order and r.original_round == 8 for r in requests)
    assert [(r.reason, r.local_epochs) for r in requests] == [
        ("negation", 3),
        ("regular_round", None),
        ("recovery", None),
        ("recovery", None),
    ]
    assert [r.unlearning_round for r in requests] == [1, 1, 2, 3]


def test_recovery_stops_once_the_probe_accuracy_reaches_the_target(logreg_fl):
    retrain = logreg_fl.problem.fedavg(8, 0.5, clients=["c1", "c2", "c3", "c4"])[-1]
    target = logreg_fl.probe.accuracy(retrain)
    params = {"eta_u": 10.0, "stop_accuracy": target}
    result = PUFStrategy().run(logreg_fl.context(params=params))
    accuracies = result.report["recovery_accuracy"]
    assert accuracies[0] < target  # the unlearning round cost accuracy
    assert all(a < target for a in accuracies[:-1]) and accuracies[-1] >= target
    assert result.report["recovery_rounds"] == len(accuracies) - 1 >= 1
    assert result.report["stopped_by"] == "accuracy" and result.report["recovery_limit"] == 30
    assert logreg_fl.probe.accuracy(result.model) == accuracies[-1]


def test_recovery_stops_at_the_limit_when_the_accuracy_is_out_of_reach(logreg_fl):
    result = PUFStrategy().run(logreg_fl.context(params={"stop_accuracy": 1.0, "recovery_rounds": 3}))
    assert result.report["stopped_by"] == "limit" and result.report["recovery_rounds"] == 3
    assert len(result.report["recovery_accuracy"]) == 4
    reached = PUFStrategy().run(logreg_fl.context(params={"stop_accuracy": 0.0}))
    assert reached.report["stopped_by"] == "accuracy" and reached.report["recovery_rounds"] == 0


def test_the_stopping_rule_needs_a_probe(logreg_fl):
    with pytest.raises(UnlearningError, match="ModelProbe"):
        PUFStrategy().run(logreg_fl.context(params={"stop_accuracy": 0.9}, with_probe=False))


def test_puf_needs_the_target_to_answer(logreg_fl):
    logreg_fl.oracle.silent = frozenset({"c0"})
    with pytest.raises(UnlearningError, match="last participation"):
        PUFStrategy().run(logreg_fl.context())


@pytest.mark.parametrize(
    "params",
    [
        {"mode": "both"},
        {"eta_u": -1},
        {"unlearning_epochs": 0},
        {"stop_accuracy": 1.5},
        {"regular_fraction": 0.0},
        {"recovery_rounds": -1},
        {"eta_u": float("nan")},
    ],
)
def test_puf_rejects_bad_parameters(logreg_fl, params):
    with pytest.raises(UnlearningError):
        PUFStrategy().run(logreg_fl.context(params=params))
