"""FedEraser: replay of retained rounds with norm-calibrated fresh updates."""

from __future__ import annotations

import pytest
import torch

from unlearning.baselines.common import norm_calibrated_update
from unlearning.baselines.federaser import FedEraserStrategy
from unlearning.baselines.retrain import RetrainStrategy
from unlearning.strategy import UnlearningError


def test_calibration_keeps_stored_length_and_fresh_direction():
    stored_norms = {"a": 5.0}  # ‖g‖ of the stored update
    fresh = {"a": torch.tensor([0.0, 2.0], dtype=torch.float64)}  # direction e_2
    out = norm_calibrated_update(stored_norms, fresh, {"a": 1.0})
    torch.testing.assert_close(out, torch.tensor([0.0, 5.0], dtype=torch.float64))


def test_retained_rounds_participation_and_first_round_needs_no_clients(logreg_fl):
    result = FedEraserStrategy().run(logreg_fl.context(params={"interval": 3}))
    assert result.report["retained_rounds"] == [1, 4, 7]
    assert result.report["rounds_used"] == 3
    assert [r.original_round for r in logreg_fl.oracle.requests] == [4, 7]
    assert all("c0" not in r.clients for r in logreg_fl.oracle.requests)
    assert result.report["arp"] == pytest.approx(100 * 6 / 8)


def test_single_retained_round_equals_one_round_of_retraining(logreg_fl):
    eraser = FedEraserStrategy().run(logreg_fl.context(params={"interval": 8}))
    assert logreg_fl.oracle.requests == []  # M_0 is untouched by the target: nobody computes
    retrain = RetrainStrategy().run(logreg_fl.context(params={"rounds": 1}))
    torch.testing.assert_close(eraser.model, retrain.model)


def test_federaser_lands_closer_to_retrain_than_the_original_model(logreg_fl):
    retrain = RetrainStrategy().run(logreg_fl.context()).model.double()
    eraser = FedEraserStrategy().run(logreg_fl.context(params={"interval": 1})).model.double()
    original = logreg_fl.history.model(8).double()
    assert (eraser - retrain).norm() < 0.5 * (original - retrain).norm()


@pytest.mark.parametrize(
    "params",
    [{"interval": 0}, {"interval": True}, {"ratio": 0.5}, {"calibration_epochs": 0}, {"calibration_epochs": 0.5}],
)
def test_federaser_rejects_bad_parameters(logreg_fl, params):
    with pytest.raises(UnlearningError):
        FedEraserStrategy().run(logreg_fl.context(params=params))


def test_calibration_epochs_are_asked_of_the_calibrating_clients(logreg_fl):
    FedEraserStrategy().run(logreg_fl.context(params={"interval": 3, "calibration_epochs": 1}))
    assert [r.local_epochs for r in logreg_fl.oracle.requests] == [1, 1]
    assert not any(r.fresh_order for r in logreg_fl.oracle.requests)
