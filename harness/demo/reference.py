"""The demo's plaintext side: metrics of public models and the retrain reference.

Retrain (the gold standard of unlearning) is FedAvg from the same M_0 over the same T
rounds with the same clients' data, data orders and settings, minus the target
(`evaluation.simulator.run_fedavg`), computed locally in plaintext by the demo in a
background thread while the service runs. Metrics are those of `evaluation.unlearning_metrics.Evaluator`:
TER on the test split, BA-ASR on the target's triggered images, MIA-ASR (loss-threshold
attack) on the target's training samples.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, replace

import torch

from evaluation.simulator import Federation, run_fedavg
from evaluation.training import LocalTrainer
from evaluation.unlearning_metrics import Evaluator


@dataclass(frozen=True)
class FederationView:
    """What `Evaluator` reads from a simulation result: the federation (data, targets, trigger)."""

    federation: Federation


def evaluator(federation: Federation) -> Evaluator:
    return Evaluator(FederationView(federation))  # type: ignore[arg-type]


class BackgroundRetrain:
    """M_retrain = FedAvg over `rounds` rounds without the targets, computed in a thread while
    the service runs (it needs nothing from the service; the demo waits for it at the end)."""

    def __init__(self, federation: Federation, m0: torch.Tensor, rounds: int) -> None:
        self._args = (federation, m0, rounds)
        self.model: torch.Tensor | None = None
        self.seconds = 0.0
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="retrain", daemon=True)

    def start(self) -> BackgroundRetrain:
        self._thread.start()
        return self

    def _run(self) -> None:
        federation, m0, rounds = self._args
        start = time.perf_counter()
        try:
            # a trainer of its own: the federation's module must not be shared between threads
            cfg = federation.config
            fed = replace(federation, trainer=LocalTrainer(cfg.architecture, cfg.lr, cfg.local_epochs, cfg.batch_size))
            self.model = run_fedavg(fed, fed.remaining(), m0, rounds)[-1]
        except BaseException as exc:  # re-raised by result()
            self.error = exc
        self.seconds = time.perf_counter() - start

    def result(self) -> torch.Tensor:
        """Wait for the retrain model (re-raises a failure)."""
        self._thread.join()
        if self.error is not None:
            raise RuntimeError(f"retrain reference failed: {self.error}") from self.error
        assert self.model is not None
        return self.model
