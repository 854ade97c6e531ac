"""ModelProbe of the simulator and the strategies that need it (Crab, FedADP)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from evaluation.dataset_probe import DatasetProbe
from evaluation.experiment import Experiment
from evaluation.models import build_model, set_flat
from evaluation.simulator import SimulationResult
from mpc.plain_backend import PlainBackend


def test_probe_outputs_are_the_models_softmax_and_loss(small_run: SimulationResult) -> None:
    ds = small_run.federation.dataset
    probe = DatasetProbe("digits_mlp", ds, samples=50)
    model = small_run.models[-1]
    p = probe.probabilities(model)
    assert p.shape == (50, 10) and torch.allclose(p.sum(1), torch.ones(50, dtype=p.dtype))
    module = build_model("digits_mlp")
    set_flat(module, model)
    with torch.no_grad():
        logits = module(torch.from_numpy(ds.test_x[:50]))
    assert torch.allclose(p.float(), torch.softmax(logits, 1), atol=1e-6)
    assert probe.loss(model) == pytest.approx(
        float(F.cross_entropy(logits, torch.from_numpy(ds.test_y[:50]))), rel=1e-5
    )
    assert probe.loss(model) < probe.loss(small_run.models[0])


@pytest.mark.parametrize("name", ["crab", "fedadp"])
def test_probe_needing_strategies_run_through_the_experiment(small_run: SimulationResult, name: str) -> None:
    out = Experiment(small_run).run(name, PlainBackend())
    assert out["strategy"] == name and 0.0 <= out["metrics"]["ter"] <= 1.0
    assert 0.0 <= out["arp_percent"] <= 100.0
