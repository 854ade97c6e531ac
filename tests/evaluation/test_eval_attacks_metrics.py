"""Backdoor trigger, membership inference rule and metric functions on constructed inputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from evaluation.attacks import (
    TriggerSpec,
    apply_trigger,
    backdoor_data,
    backdoor_eval_set,
    best_threshold,
    class_threshold_predictions,
    class_thresholds,
    loss_threshold,
    membership_predictions,
)
from evaluation.models import build_model, get_flat, set_flat
from evaluation.simulator import SimulationResult
from evaluation.unlearning_metrics import Evaluator, attack_success_rate, average_round_saving, error_rate, model_gap


def test_trigger_stamps_only_the_bottom_right_patch() -> None:
    x = np.zeros((2, 1, 28, 28), dtype=np.float32)
    spec = TriggerSpec.for_shape(28)
    assert (spec.size, spec.margin) == (4, 1)
    out = apply_trigger(x, spec)
    assert np.all(out[:, :, 23:27, 23:27] == 1.0)
    assert out.sum() == 2 * 16  # nothing else changed
    assert x.sum() == 0  # input untouched
    small = apply_trigger(np.zeros((1, 1, 8, 8), dtype=np.float32), TriggerSpec.for_shape(8))
    assert np.all(small[0, 0, 6:8, 6:8] == 1.0) and small.sum() == 4
    with pytest.raises(ValueError, match="does not fit"):
        apply_trigger(np.zeros((1, 1, 3, 3), dtype=np.float32), TriggerSpec(size=4))


def test_backdoor_data_appends_relabelled_triggered_copies() -> None:
    x = np.random.default_rng(0).random((5, 1, 8, 8), dtype=np.float32)
    y = np.array([0, 1, 2, 3, 4])
    spec = TriggerSpec(target_label=7, size=2, margin=0)
    bx, by = backdoor_data(x, y, spec, copies=2)
    assert bx.shape == (15, 1, 8, 8)
    assert np.array_equal(bx[:5], x) and np.array_equal(by[:5], y)
    assert np.all(by[5:] == 7) and np.array_equal(bx[5:10], bx[10:])
    assert np.array_equal(bx[5:10], apply_trigger(x, spec))
    assert backdoor_data(x, y, spec, copies=0)[0].shape == x.shape
    evalset = backdoor_eval_set(x, np.array([7, 1, 7, 3, 4]), spec)
    assert len(evalset) == 3  # images already labelled 7 are left out


def test_loss_threshold_attack_rule() -> None:
    tau = loss_threshold(np.array([0.1, 0.2, 0.6]))
    assert tau == pytest.approx(0.3)
    assert membership_predictions(np.array([0.05, 0.3, 0.31, 2.0]), tau).tolist() == [True, True, False, False]
    with pytest.raises(ValueError):
        loss_threshold(np.array([]))


def test_metric_functions_on_constructed_inputs() -> None:
    assert error_rate(np.array([1, 2, 3, 4]), np.array([1, 2, 0, 0])) == 0.5
    assert attack_success_rate(np.array([0, 0, 5, 0]), 0) == 0.75
    # T = 10 stored rounds; a asked 3 rounds, b asked 10, c never asked
    assert average_round_saving({"a": 3, "b": 10}, ["a", "b", "c"], 10) == pytest.approx((70 + 0 + 100) / 3)
    gap = model_gap(torch.tensor([3.0, 4.0]), torch.tensor([0.0, 0.0]) + torch.tensor([0.0, 8.0]))
    assert gap["l2"] == pytest.approx(5.0) and gap["relative"] == pytest.approx(5.0 / 8.0)
    with pytest.raises(ValueError):
        error_rate(np.array([]), np.array([]))


def test_evaluator_on_a_model_that_always_answers_the_target_label(small_run: SimulationResult) -> None:
    module = build_model("digits_mlp")
    set_flat(module, torch.zeros(2410))
    with torch.no_grad():
        module[-1].bias[small_run.federation.trigger.target_label] = 5.0  # constant logits → always label 0
    ev = Evaluator(small_run)
    out = ev.evaluate(get_flat(module))
    test_y = small_run.federation.dataset.test_y
    assert out["ter"] == pytest.approx(np.mean(test_y != 0))
    assert out["ba_asr"] == 1.0
    # every sample of a label has the same loss; members and target share the label mix closely
    assert 0.0 <= out["mia_asr"] <= 1.0 and 0.0 <= out["mia_test_rate"] <= 1.0


def test_evaluator_sees_the_backdoor_of_the_trained_model(small_run: SimulationResult) -> None:
    ev = Evaluator(small_run)
    initial = ev.evaluate(small_run.models[0])
    final = ev.evaluate(small_run.models[-1])
    assert final["ter"] < initial["ter"]
    assert len(ev.target_y) == 2 * len(small_run.federation.clean_target_data["client-00"][1])


def test_confidence_attack_learns_the_separating_threshold_per_class() -> None:
    members = np.array([0.1, 0.2, 0.3, 0.9])
    outside = np.array([0.25, 1.0, 2.0, 3.0])
    # τ = 0.9: TPR 4/4, TNR 3/4; τ = 0.3 reaches only 3/4 and 3/4
    assert best_threshold(members, outside) == 0.9
    labels_in, labels_out = np.array([0, 0, 1, 1]), np.array([0, 0, 1, 1])
    taus = class_thresholds(members, labels_in, outside, labels_out, num_classes=3)
    assert taus[0] == 0.2  # class 0: members 0.1, 0.2 vs outside 0.25, 1.0
    assert taus[1] == 0.9  # class 1: members 0.3, 0.9 vs outside 2.0, 3.0
    assert taus[2] == 0.9  # no samples of class 2: the pooled threshold
    predicted = class_threshold_predictions(np.array([0.21, 0.5, 0.95]), np.array([0, 1, 2]), taus)
    assert predicted.tolist() == [False, True, False]
    with pytest.raises(ValueError):
        best_threshold(np.array([]), outside)


def test_forget_accuracy_and_confidence_attack_see_the_trained_target(small_run: SimulationResult) -> None:
    evaluator = Evaluator(small_run)
    trained, initial = evaluator.evaluate(small_run.models[-1]), evaluator.evaluate(small_run.models[0])
    retrained = evaluator.evaluate(small_run.retrain_models()[-1])
    clean_x, clean_y = small_run.federation.clean_target_data["client-00"]
    assert trained["forget_accuracy"] > initial["forget_accuracy"] + 0.3
    module = build_model(small_run.config.architecture)
    set_flat(module, small_run.models[-1])
    with torch.no_grad():
        predicted = module(torch.from_numpy(clean_x)).argmax(1).numpy()
    assert trained["forget_accuracy"] == pytest.approx(float(np.mean(predicted == clean_y)))
    # the model that trained on the target's samples is more confident on them than retraining
    assert trained["mia_confidence"] > retrained["mia_confidence"] + 0.1
