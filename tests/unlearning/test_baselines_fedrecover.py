"""FedRecover: L-BFGS estimation with warm-up, periodic correction, abnormality fixing, final tuning."""

from __future__ import annotations

import pytest
import torch

from mpc.plain_backend import PlainBackend
from unlearning.baselines.fedrecover import (
    FedRecoverStrategy,
    abnormal_clients,
    abnormality_threshold,
    gradient_peaks,
    is_exact_round,
)
from unlearning.baselines.retrain import RetrainStrategy
from unlearning.strategy import UnlearningError

ALL_ESTIMATED = {"warmup_rounds": 3, "correction_interval": 0, "final_tuning": 0, "tolerance_rate": 1e-6}
#: τ then is the largest stored ‖g‖_∞, which the shrinking estimates never exceed


def test_schedule_of_exact_rounds():
    exact = {t: is_exact_round(t, 20, warmup=3, interval=4, final=2) for t in range(1, 21)}
    assert {t for t, k in exact.items() if k} == {1, 2, 3, 7, 11, 15, 19, 20}
    assert (exact[2], exact[7], exact[20], exact[8]) == ("warmup", "correction", "final_tuning", None)


def test_abnormality_threshold_leaves_the_tolerance_fraction_of_gradients_above():
    backend = PlainBackend()
    order = torch.randperm(20, generator=torch.Generator().manual_seed(1)).to(torch.float64)
    grads = torch.zeros(20, 4, dtype=torch.float64)
    grads[torch.arange(20), order.long() % 4] = torch.where(order % 2 == 0, 1.0, -1.0) * 0.2 * (order + 1)
    peaks = gradient_peaks(backend, backend.share(grads))  # ‖g_k‖_∞ = 0.2·(order_k + 1), signs mixed
    torch.testing.assert_close(backend.reveal(peaks), 0.2 * (order + 1))
    tau = float(backend.reveal(abnormality_threshold(backend, peaks, tolerance=0.1))[0])
    assert tau == pytest.approx(0.2 * 18)
    flagged = abnormal_clients(
        backend, backend.share(torch.tensor([tau])), [f"c{k}" for k in range(20)], backend.share(grads)
    )
    assert flagged == [f"c{k}" for k in range(20) if order[k] >= 18]


def test_correction_every_round_equals_exact_recomputation(logreg_fl):
    params = {"warmup_rounds": 1, "correction_interval": 1, "final_tuning": 0}
    recovered = FedRecoverStrategy().run(logreg_fl.context(params=params))
    retrain = RetrainStrategy().run(logreg_fl.context())
    torch.testing.assert_close(recovered.model, retrain.model)
    assert set(recovered.report["round_kinds"].values()) == {"warmup", "correction"}
    assert recovered.report["arp"] == 0.0


def test_estimation_tracks_retrain_while_saving_client_rounds(logreg_fl):
    recovered = FedRecoverStrategy().run(logreg_fl.context(params=ALL_ESTIMATED))
    retrain = RetrainStrategy().run(logreg_fl.context()).model.double()
    original = logreg_fl.history.model(8).double()
    gap = float((recovered.model.double() - retrain).norm())
    assert gap < 0.2 * float((original - retrain).norm())
    report = recovered.report
    assert report["round_kinds"]["4"] == "estimate" and report["abnormal"] == {}
    assert report["client_rounds"] == dict.fromkeys(["c1", "c2", "c3", "c4"], 3)
    assert report["arp"] == pytest.approx(100 * 5 / 8)
    assert report["curvature"]["offered"] == 8  # rounds 2 and 3 (round 1 has M̂ = M: no pair)


def test_estimates_without_curvature_pairs_keep_the_stored_gradient(logreg_fl):
    params = {**ALL_ESTIMATED, "warmup_rounds": 1}  # round 1 gives no pair: nothing to estimate with
    recovered = FedRecoverStrategy().run(logreg_fl.context(params=params))
    problem = logreg_fl.problem
    model = logreg_fl.history.model(0)
    remaining = ["c1", "c2", "c3", "c4"]
    total = sum(problem.n(c) for c in remaining)
    for i in range(8):  # round 1 exact at M_0 == stored; later rounds reuse the stored g_i at M_{i-1}
        at = logreg_fl.history.model(i)
        g = sum(problem.n(c) / total * problem.gradient(c, at) for c in remaining)
        model = (model.double() - 0.5 * g).float()
    torch.testing.assert_close(recovered.model, model)


def test_abnormality_fixing_asks_clients_whose_estimate_is_too_large(logreg_fl):
    estimated = FedRecoverStrategy().run(logreg_fl.context(params=ALL_ESTIMATED)).model.double()
    logreg_fl.oracle.requests.clear()
    params = {**ALL_ESTIMATED, "tolerance_rate": 0.999}  # τ is the smallest stored ‖g‖_∞
    fixed = FedRecoverStrategy().run(logreg_fl.context(params=params))
    report = fixed.report
    asked = {str(r.unlearning_round): list(r.clients) for r in logreg_fl.oracle.requests if r.reason == "abnormality"}
    assert asked == report["abnormal"] and asked  # exactly the flagged clients were asked, in estimated rounds
    assert set(asked) <= {str(t) for t in range(4, 9)}
    retrain = RetrainStrategy().run(logreg_fl.context()).model.double()
    assert (fixed.model.double() - retrain).norm() < (estimated - retrain).norm()
    assert "threshold" not in report  # τ stays secret


def test_silent_client_keeps_its_estimate(logreg_fl):
    logreg_fl.oracle.silent = frozenset({"c2"})
    params = {"warmup_rounds": 1, "correction_interval": 1, "final_tuning": 0}
    report = FedRecoverStrategy().run(logreg_fl.context(params=params)).report
    assert {m["client"] for m in report["missing_answers"]} == {"c2"}
    assert report["client_rounds"]["c2"] == 8  # asked in every round (ARP counts asks, as Starfish's does)
    assert report["corrections"]["missing"] == 8


@pytest.mark.parametrize(
    "params",
    [
        {"buffer_size": 0},
        {"tolerance_rate": 1.0},
        {"inverse": "dense"},
        {"correction_interval": -1},
        {"hv_bound": 0.0},
        {"T_c": 4},
    ],
)
def test_fedrecover_rejects_bad_parameters(logreg_fl, params):
    with pytest.raises(UnlearningError):
        FedRecoverStrategy().run(logreg_fl.context(params=params))
