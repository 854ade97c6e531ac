"""Shared fixtures: one small digits federation trained once per test session (`helpers.eval_federations`),
the `trained` federation's experiment and levels."""

from __future__ import annotations

import pytest

from evaluation.experiment import Experiment
from evaluation.simulator import SimulationResult, simulate
from evaluation.training import torch_threads

from helpers.eval_federations import SMALL


@pytest.fixture(scope="session")
def small_run() -> SimulationResult:
    with torch_threads(1):
        return simulate(SMALL)


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Tiny models train far faster on one thread, and a busy machine does not stall them."""
    with torch_threads(1):
        yield


@pytest.fixture(scope="module")
def experiment(trained: tuple[Experiment, dict[str, dict[str, float]]]) -> Experiment:
    """The experiment of the module's `trained` fixture (a `backdoored_experiment`)."""
    return trained[0]


@pytest.fixture(scope="module")
def levels(trained: tuple[Experiment, dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """The "before" and "retrain" metrics of the module's `trained` fixture."""
    return trained[1]
