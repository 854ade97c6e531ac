"""The demo's plaintext side: metrics of public models and the retrain reference.

Retrain (the gold standard of unlearning) is FedAvg from the same M_0 over the same T
rounds with the same clients' data, data orders and settings, minus the target
(`evaluation.simulator.run_fedavg`), computed locally in plaintext by the demo. Metrics
are those of `evaluation.metrics.Evaluator`: TER on the test split, BA-ASR on the target's
triggered images, MIA-ASR (loss-threshold attack) on the target's training samples.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from evaluation.metrics import Evaluator
from evaluation.simulator import Federation, run_fedavg


@dataclass(frozen=True)
class FederationView:
    """What `Evaluator` reads from a simulation result: the federation (data, targets, trigger)."""

    federation: Federation


def evaluator(federation: Federation) -> Evaluator:
    return Evaluator(FederationView(federation))  # type: ignore[arg-type]


def retrain(federation: Federation, m0: torch.Tensor, rounds: int,
            on_round: Callable[[int, int], None] | None = None) -> torch.Tensor:
    """M_retrain after `rounds` FedAvg rounds without the targets."""
    return run_fedavg(federation, federation.remaining(), m0, rounds, on_round)[-1]
