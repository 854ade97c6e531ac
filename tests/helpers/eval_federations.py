"""The evaluation tests' federations: the small digits setting trained once per session, and a
backdoored federation measured before and after retraining for the forgetting tests."""

from __future__ import annotations

from typing import Any

from evaluation.experiment import Experiment
from evaluation.simulator import SimulationConfig, simulate
from evaluation.training import torch_threads
from mpc.plain_backend import PlainBackend

#: 6 clients (client-00 backdoored), 4 rounds of the 2,410-parameter digits MLP
SMALL = SimulationConfig(dataset="digits", num_clients=6, rounds=4, lr=0.5, local_epochs=1, batch_size=32, seed=3)


def backdoored_experiment(config: SimulationConfig) -> tuple[Experiment, dict[str, dict[str, float]]]:
    """The federation of `config` trained once, with the metrics of the trained model
    ("before") and of retraining without the targets ("retrain"); the backdoor must have
    taken hold and retraining must drop it."""
    with torch_threads(1):
        experiment = Experiment(simulate(config))
        before = experiment.evaluator.evaluate(experiment.result.models[-1])
        retrain = experiment.evaluator.evaluate(experiment.reference())
    assert before["ba_asr"] >= 0.9 and retrain["ba_asr"] <= 0.02
    return experiment, {"before": before, "retrain": retrain}


def unlearn(experiment: Experiment, name: str, params: dict[str, Any]) -> dict[str, Any]:
    """Strategy `name` with `params` on the plaintext backend, measured (no model gap)."""
    with torch_threads(1):
        return experiment.run(name, PlainBackend(), params, with_gap=False)
