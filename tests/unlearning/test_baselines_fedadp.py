"""FedADP: adaptive budget, Gaussian mechanism, dual-layer selection, cosine-scaled calibration."""

from __future__ import annotations

import math

import pytest
import torch

from mpc.plain_backend import PlainBackend
from privacy.adaptive import budget_schedule, noise_std, privatize
from unlearning.baselines.fedadp import FedADPStrategy
from unlearning.history import UploadPrivacy
from unlearning.strategy import UnlearnContext, UnlearningError

from helpers.synthetic_fl import LogRegFL, LogRegProbe, TableOracle, history_from_gradients


def test_budget_schedule_follows_eq4():
    losses = [2.0, 1.5, 1.4, 1.45, 0.2]
    budgets = budget_schedule(losses, epsilon_0=1.0, epsilon_min=0.5, epsilon_max=3.0)
    e2 = 1.0 * math.exp(0.5)
    e3 = e2 * math.exp(0.1)
    e4 = e3 * math.exp(0.05)
    assert budgets == pytest.approx([1.0, e2, e3, e4])
    assert budget_schedule([2.0, 0.0, 0.0], 1.0, 0.5, 3.0) == pytest.approx([1.0, 3.0])  # capped at ε_max


def test_noise_std_and_mechanism():
    assert noise_std(2.0, 1e-5, 3.0) == pytest.approx(2.0 * math.sqrt(2 * math.log(125000)) / 3.0)
    gen = torch.Generator().manual_seed(1)
    g = torch.full((40_000,), 0.05, dtype=torch.float64)  # ‖g‖ = 10
    clipped = privatize(g, clip_norm=2.0, std=0.0, generator=gen)
    assert float(clipped.norm()) == pytest.approx(2.0)
    noised = privatize(g, clip_norm=2.0, std=0.3, generator=gen)
    assert float((noised - clipped).std()) == pytest.approx(0.3, rel=0.03)


def constructed(fresh_rows=None):
    """Six rounds in 2-D: rounds 2 and 5 turn the model sharply; a, b benign, u target."""
    table = []
    for i in range(1, 7):
        turn = torch.tensor([0.0, 3.0]) if i in (2, 5) else torch.tensor([-0.05, 0.0])
        table.append({"a": turn * 1.0, "b": turn * 0.9, "u": -turn})
    backend = PlainBackend()
    history = history_from_gradients(backend, torch.tensor([1.0, 0.0]), table, {"a": 10, "b": 10, "u": 10}, lr=0.5)
    oracle = TableOracle(fresh_rows or table)
    params = {"dp": False, "loss_reduction": 0.999, "model_ratio": 2 / 6, "update_ratio": 2 / 3}
    ctx = UnlearnContext(
        backend=backend,
        history=history,
        oracle=oracle,
        targets=("u",),
        params=params,
        probe=LogRegProbe(LogRegFL.make(dim=2, seed=3)),
    )
    return ctx, table, oracle


def test_selects_least_aligned_models_and_most_aligned_updates_and_replays_them():
    ctx, table, oracle = constructed()
    models = [ctx.history.model(i).double() for i in range(7)]
    cos = {i: float(torch.nn.functional.cosine_similarity(models[i], models[i - 1], dim=0)) for i in range(1, 7)}
    least = sorted(sorted(cos, key=cos.get)[:2])
    result = FedADPStrategy().run(ctx)
    report = result.report
    assert report["selected_rounds"] == least == [2, 5]
    assert report["selected_clients"] == {"2": ["a", "b"], "5": ["a", "b"]}  # u opposes the aggregate
    assert [r.original_round for r in oracle.requests] == [2, 5]
    # fresh == stored, so U^c = ḡ^c and the replay applies FedAvg(a, b) of rounds 2 and 5
    expected = (
        models[0]
        - 0.5 * (table[1]["a"] + table[1]["b"]).double() / 2
        - 0.5 * (table[4]["a"] + table[4]["b"]).double() / 2
    )
    torch.testing.assert_close(result.model, expected.float())
    assert report["budgets"] == [] and report["privacy"] == {"source": "none"}


def test_orthogonal_fresh_updates_do_not_move_the_model():
    fresh = [{c: torch.tensor([3.0, 0.0]) for c in "abu"} for _ in range(6)]
    ctx, _, _ = constructed(fresh_rows=fresh)
    result = FedADPStrategy().run(ctx)
    torch.testing.assert_close(result.model, ctx.history.model(0))


def test_dp_run_is_seeded_and_reports_the_schedule(logreg_fl):
    first = FedADPStrategy().run(logreg_fl.context(params={"seed": 3}))
    again = FedADPStrategy().run(logreg_fl.context(params={"seed": 3}))
    other = FedADPStrategy().run(logreg_fl.context(params={"seed": 4}))
    torch.testing.assert_close(first.model, again.model)
    assert not torch.allclose(first.model, other.model)
    budgets = first.report["budgets"]
    assert len(budgets) == 8 and all(1.0 <= b <= 3.0 for b in budgets)
    assert first.report["noise_std"] == pytest.approx([noise_std(1.0, 1e-5, b) for b in budgets])
    assert first.report["privacy"]["source"] == "read_time"
    assert all("c0" not in r.clients for r in logreg_fl.oracle.requests)
    assert torch.isfinite(first.model).all()


def test_history_privatized_is_refused_on_a_history_with_clean_uploads(logreg_fl):
    assert logreg_fl.history.upload_privacy() is None
    with pytest.raises(UnlearningError, match="declares no privatized uploads"):
        FedADPStrategy().run(logreg_fl.context(params={"history_privatized": True}))
    assert logreg_fl.oracle.requests == []


def declared(history, budgets):
    """`history` declaring that its uploads were privatized with these budgets (S = 1)."""
    stds = tuple(noise_std(1.0, 1e-5, e) for e in budgets)
    history.privacy = UploadPrivacy("gaussian", 1.0, 1e-5, tuple(budgets), stds)
    return history


def test_privatized_history_is_read_as_stored_and_reports_the_clients_budgets(logreg_fl):
    declared(logreg_fl.history, [1.0 + 0.25 * i for i in range(8)])
    for params in ({"history_privatized": False}, {"dp": False}):
        with pytest.raises(UnlearningError, match="noise twice"):
            FedADPStrategy().run(logreg_fl.context(params=params))
    result = FedADPStrategy().run(logreg_fl.context(params={"history_privatized": True, "seed": 1}))
    again = FedADPStrategy().run(logreg_fl.context(params={"history_privatized": True, "seed": 2}))
    torch.testing.assert_close(result.model, again.model)  # no noise of its own: the seed plays no part
    assert result.report["budgets"] == [1.0 + 0.25 * i for i in range(8)]
    assert result.report["noise_std"] == list(logreg_fl.history.privacy.noise_std)
    assert result.report["privacy"] == {"source": "uploads", "mechanism": "gaussian", "clip_norm": 1.0, "delta": 1e-5}


def test_privatized_history_must_declare_one_budget_per_round(logreg_fl):
    declared(logreg_fl.history, [1.0, 2.0])
    with pytest.raises(UnlearningError, match="2 budgets for 8 rounds"):
        FedADPStrategy().run(logreg_fl.context(params={"history_privatized": True}))


def test_fedadp_needs_a_probe(logreg_fl):
    with pytest.raises(UnlearningError, match="ModelProbe"):
        FedADPStrategy().run(logreg_fl.context(with_probe=False))


@pytest.mark.parametrize(
    "params",
    [
        {"epsilon_0": 5.0},
        {"epsilon_min": 4.0},
        {"dp_delta": 1.0},
        {"dp": False, "history_privatized": True},
        {"dp": 1},
        {"clip_norm": 0},
    ],
)
def test_fedadp_rejects_bad_parameters(logreg_fl, params):
    with pytest.raises(UnlearningError):
        FedADPStrategy().run(logreg_fl.context(params=params))
