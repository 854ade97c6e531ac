"""Run unlearning strategies on one simulated history and measure them.

For each strategy: build the history on the chosen backend (`SimulationResult.history`),
a fresh `SimulatedOracle` (so participation is counted per strategy) and the probe, run
the strategy, and record wall time, TER / BA-ASR / MIA-ASR of the unlearned model, ARP
from the oracle's request log, the gap ‖M̂ − M_retrain‖ to the exact retrain reference
(FedAvg from M_0 without the targets, same data orders), and the strategy's own report
(selected rounds, correction flags, Theorem 1 inputs, costs).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from evaluation.dataset_probe import DatasetProbe
from evaluation.simulated_oracle import SimulatedOracle
from evaluation.simulator import SimulationResult
from evaluation.unlearning_metrics import Evaluator, average_round_saving, model_gap
from mpc.backend import Backend
from unlearning import registry
from unlearning.fedavg import AggregatePrivacy
from unlearning.history import SharedHistory
from unlearning.strategy import Progress, UnlearnContext

ProgressCallback = Callable[[Progress], None]


def json_ready(value: Any) -> Any:
    """Convert tensors, numpy values, tuples and sets to JSON types; non-finite floats to None."""
    if isinstance(value, Mapping):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [json_ready(v) for v in value]
    if isinstance(value, torch.Tensor):
        return json_ready(value.detach().cpu().tolist() if value.numel() <= 64 else {"shape": list(value.shape)})
    if isinstance(value, np.ndarray):
        return json_ready(value.tolist())
    if isinstance(value, np.generic):
        return json_ready(value.item())
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (bool, int, str)):
        return value
    return str(value)


class Experiment:
    """One trained history, evaluated models, and the retrain reference."""

    def __init__(self, result: SimulationResult, reference: torch.Tensor | None = None) -> None:
        """`reference`: a precomputed M_retrain (e.g. cached); computed on first use otherwise."""
        self.result = result
        self._reference = reference
        self.evaluator = Evaluator(result)
        self.probe = DatasetProbe(result.config.architecture, result.federation.dataset)
        self._histories: dict[int, SharedHistory] = {}

    def history_for(self, backend: Backend) -> SharedHistory:
        """The history shared on `backend` (built once per backend object)."""
        key = id(backend)
        if key not in self._histories:
            self._histories[key] = self.result.history(backend)
        return self._histories[key]

    def reference(self) -> torch.Tensor:
        """M_retrain: exact FedAvg from M_0 without the targets."""
        if self._reference is None:
            self._reference = self.result.retrain_models()[-1]
        return self._reference

    def training_summary(self, eval_rounds: list[int]) -> dict[str, Any]:
        """Stage I facts and the metrics of M_i at the given rounds."""
        res = self.result
        return {
            "seconds": res.train_seconds,
            "parameters": int(res.models[0].numel()),
            "n_samples": res.federation.n_samples,
            "targets": list(res.targets),
            "target_weight": sum(res.federation.n_samples[t] for t in res.targets)
            / sum(res.federation.n_samples.values()),
            "curve": [{"round": i, **self.evaluator.evaluate(res.models[i])} for i in eval_rounds],
            "final": self.evaluator.evaluate(res.models[-1]),
        }

    def run(
        self,
        name: str,
        backend: Backend,
        params: Mapping[str, Any] | None = None,
        on_progress: ProgressCallback | None = None,
        with_gap: bool = True,
        privacy: AggregatePrivacy | None = None,
    ) -> dict[str, Any]:
        """Run strategy `name` on `backend` in this process and return its measurements
        (`privacy`: optional DP of every revealed aggregate, `privacy.distributed`)."""
        history = self.history_for(backend)
        outcome = execute(self.result, name, backend, history, params, on_progress, self.probe, privacy=privacy)
        return self.measure(outcome, with_gap)

    def measure(self, outcome: Outcome, with_gap: bool = True) -> dict[str, Any]:
        """JSON-ready metrics, ARP, gap to retrain and report of a finished run."""
        model = outcome.model.to(torch.float32)
        finite = bool(torch.isfinite(model).all())
        metrics: dict[str, Any] = self.evaluator.evaluate(model) if finite else {"diverged": True}
        remaining = [c for c in self.result.client_ids if c not in self.result.targets]
        out: dict[str, Any] = {
            "strategy": outcome.name,
            "backend": outcome.backend,
            "params": outcome.params,
            "seconds": outcome.seconds,
            "metrics": metrics,
            "arp_percent": average_round_saving(outcome.participation, remaining, self.result.config.rounds),
            "client_rounds": {c: outcome.participation.get(c, 0) for c in remaining},
            "oracle_calls": outcome.calls,
            "report": outcome.report,
        }
        selection = outcome.report.get("selection")
        if isinstance(selection, Mapping) and "selected_rounds" in selection:
            out["selected_rounds"] = selection["selected_rounds"]
        if "flags" in outcome.report:
            out["flags"] = outcome.report["flags"]
        if with_gap and finite:
            out["gap_to_retrain"] = model_gap(model, self.reference())
        return json_ready(out)


@dataclass
class Outcome:
    """What one strategy run produced (picklable, so a party process can return it)."""

    name: str
    backend: str
    params: dict[str, Any]
    model: torch.Tensor
    report: dict[str, Any]
    seconds: float
    participation: dict[str, int]  #: T_r^j from the oracle's log
    calls: list[dict[str, Any]]  #: the oracle's requests (public facts)


def execute(
    result: SimulationResult,
    name: str,
    backend: Backend,
    history: SharedHistory,
    params: Mapping[str, Any] | None = None,
    on_progress: ProgressCallback | None = None,
    probe: DatasetProbe | None = None,
    oracle: SimulatedOracle | None = None,
    privacy: AggregatePrivacy | None = None,
) -> Outcome:
    """Run strategy `name` once on `history` with a fresh oracle; time it."""
    strategy = registry.create(name)
    oracle = oracle if oracle is not None else SimulatedOracle(result)
    ctx = UnlearnContext(
        backend=backend,
        history=history,
        oracle=oracle,
        targets=result.targets,
        params=dict(params or {}),
        on_progress=on_progress,
        probe=probe,
        privacy=privacy,
    )
    start = time.perf_counter()
    outcome = strategy.run(ctx)
    seconds = time.perf_counter() - start
    calls = [
        {
            "t": c.unlearning_round,
            "round": c.original_round,
            "reason": c.reason,
            "clients": len(c.clients),
            "unanswered": list(c.unanswered),
        }
        for c in oracle.calls
    ]
    return Outcome(
        name,
        backend.name,
        dict(params or {}),
        outcome.model.detach().to(torch.float32).clone(),
        dict(outcome.report),
        seconds,
        oracle.participation(),
        calls,
    )
