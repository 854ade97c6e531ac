"""Shared fixtures: one small digits federation trained once per test session."""

from __future__ import annotations

import pytest

from evaluation.simulator import SimulationConfig, SimulationResult, simulate
from evaluation.training import torch_threads

#: 6 clients (client-00 backdoored), 4 rounds of the 2,410-parameter digits MLP
SMALL = SimulationConfig(dataset="digits", num_clients=6, rounds=4, lr=0.5, local_epochs=1, batch_size=32, seed=3)


@pytest.fixture(scope="session")
def small_run() -> SimulationResult:
    with torch_threads(1):
        return simulate(SMALL)


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Tiny models train far faster on one thread, and a busy machine does not stall them."""
    with torch_threads(1):
        yield
