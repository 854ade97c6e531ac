"""Run a strategy of the simulator on the CrypTen backend: dealer + two party processes.

Both parties load the same saved Stage I history (`SimulationResult.save`), party 0
secret-shares every stored upload (`backend.share`, CSPRNG masks) and both run the
strategy in lock step; warm-up and correction requests are answered by party 0's
simulated clients (party 1 contributes the ignored zeros of the sharing protocol). Both
parties build the same probe from the public dataset (Crab and FedADP read public models'
outputs on it). Both parties must end with the same public model; party 0's outcome is
returned.

This is a simulation of the secure computation (one machine, no client processes);
sharing a whole history costs 8 bytes per stored value, so it suits small models
(digits) and short histories.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from evaluation.dataset_probe import DatasetProbe
from evaluation.experiment import Outcome, execute
from evaluation.simulated_oracle import SimulatedOracle
from evaluation.simulator import SimulationResult
from mpc.backend import Backend

#: wall-clock limit of one two-party strategy run (seconds)
DEFAULT_TIMEOUT_S = 3600.0


def _party_run(
    backend: Backend, rank: int, history_path: str, name: str, params: dict[str, Any], threads: int
) -> Outcome:
    """Executed in each party process (module level so the spawn start method can import it)."""
    torch.set_num_threads(threads)
    result = SimulationResult.load(history_path)
    history = result.history(backend)
    oracle = SimulatedOracle(result, compute=rank == 0)
    probe = DatasetProbe(result.config.architecture, result.federation.dataset)
    return execute(result, name, backend, history, params, probe=probe, oracle=oracle)


def run_mpc(
    result: SimulationResult,
    name: str,
    params: Mapping[str, Any] | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    threads: int = 1,
) -> Outcome:
    """Run strategy `name` under 2PC on `result`'s history; both parties must agree."""
    from mpc.cluster import run_two_party

    with tempfile.TemporaryDirectory(prefix="starfish-sim-") as tmp:
        path = Path(tmp) / "history.npz"
        result.save(path)
        out0, out1 = run_two_party(_party_run, (str(path), name, dict(params or {}), threads), timeout=timeout)
    if not torch.equal(out0.model, out1.model):
        raise RuntimeError("the two parties ended with different public models")
    return out0
