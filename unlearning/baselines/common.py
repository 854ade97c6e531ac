"""Pieces shared by the baseline strategies.

* `RunLog`: fresh gradients through the `GradientOracle` with per-client participation
  accounting (for ARP, Starfish §V: ARP = mean over remaining clients of (T − T_r)/T·100 %,
  T_r = rounds the client was asked to compute in), per-step timings, and the JSON report;
* model steps: M ← M − η·G and the public aggregate of a stored round (FedAvg weights and
  the revealed aggregate are `unlearning.fedavg`'s);
* plaintext helpers (norms, cosines, loss windows, top-fraction selection) for the
  strategies that declare `requires_plaintext = True`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from mpc.backend import Backend, Secret
from unlearning.history import GradientRequest
from unlearning.strategy import UnlearnContext, UnlearningError
from unlearning.strategy_params import StrategyParams


# --------------------------------------------------------------------------- model steps
def descend(model: torch.Tensor, update: torch.Tensor, lr: float) -> torch.Tensor:
    """M ← M − η·G, kept as the flat float32 public model of the history contract."""
    return (model.to(torch.float64) - lr * update.to(torch.float64)).to(torch.float32)


def stored_round_update(ctx: UnlearnContext, i: int) -> torch.Tensor:
    """The public aggregate of stored round i, G_i = (M_{i−1} − M_i)/η_i (no secret read)."""
    info = ctx.history.round_info(i)
    return (ctx.history.model(i - 1).to(torch.float64) - ctx.history.model(i).to(torch.float64)) / info.lr


# --------------------------------------------------------------------------- plaintext maths
def plain(backend: Backend, value: Secret) -> torch.Tensor:
    """The float64 value of a secret on the plaintext backend (strategies that need it
    declare `requires_plaintext`, so `validate` has already refused a secure backend)."""
    if backend.is_secure:
        raise UnlearningError("internal error: plaintext access attempted on a secure backend")
    return backend.reveal(value).to(torch.float64)


def stored_plain(ctx: UnlearnContext, i: int, clients: Sequence[str]) -> dict[str, torch.Tensor]:
    """Stored gradients g_i^j of `clients` in round i as float64 tensors (plaintext only)."""
    if not clients:
        return {}
    rows = plain(ctx.backend, ctx.history.gradients(ctx.backend, i, list(clients)))
    return {c: rows[k] for k, c in enumerate(clients)}


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    """cos(a, b) = ⟨a, b⟩ / (‖a‖·‖b‖); 0 when either vector is zero."""
    na, nb = float(a.norm()), float(b.norm())
    if na == 0.0 or nb == 0.0:
        return 0.0
    return float(torch.dot(a.to(torch.float64), b.to(torch.float64))) / (na * nb)


def top_fraction(scores: Mapping[Any, float], fraction: float, largest: bool = True) -> list[Any]:
    """The ⌈fraction·n⌉ keys with the largest (or smallest) scores; ties go to the key
    that comes first in `scores`' order. Returned in that order too."""
    keys = list(scores)
    count = min(len(keys), max(1, math.ceil(fraction * len(keys) - 1e-9))) if keys else 0
    order = sorted(range(len(keys)), key=lambda k: (-scores[keys[k]] if largest else scores[keys[k]], k))
    chosen = sorted(order[:count])
    return [keys[k] for k in chosen]


def loss_windows(losses: Sequence[float], rate: float) -> list[list[int]]:
    """Split rounds 1..T into time windows by loss reduction (Crab Algorithm 2 lines 12–17,
    FedADP Algorithm 1 line 18): a window closes at round i once F(M_i) ≤ (1 − rate)·F at the
    previous window's end. `losses[i]` is F(M_i) for i = 0..T. Rounds left open when
    training stops form a last window (the papers leave them unstored; we keep them)."""
    windows: list[list[int]] = []
    current: list[int] = []
    prev = losses[0]
    for i in range(1, len(losses)):
        current.append(i)
        if losses[i] <= (1.0 - rate) * prev:
            windows.append(current)
            current = []
            prev = losses[i]
    if current:
        windows.append(current)
    return windows


# --------------------------------------------------------------------------- run log
class RunLog:
    """Oracle calls, participation, missing answers, timings and the JSON report of one run."""

    def __init__(self, ctx: UnlearnContext, strategy: str) -> None:
        self.ctx = ctx
        self.strategy = strategy
        self.remaining = ctx.remaining_clients()
        self.rounds_asked: dict[str, set[int]] = {c: set() for c in self.remaining}
        self.target_rounds: dict[str, set[int]] = {c: set() for c in ctx.targets}
        self.missing: list[dict[str, Any]] = []
        self.rounds_used = 0
        self.seconds: dict[str, float] = {}
        self._start = time.perf_counter()
        self._dim = int(ctx.history.model(0).numel())

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        """Time a step in the backend's cost ledger and in this run's report."""
        start = time.perf_counter()
        with self.ctx.backend.step(f"{self.strategy}.{name}"):
            yield
        self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start

    def fresh_gradients(
        self,
        model: torch.Tensor,
        t: int,
        original_round: int,
        clients: Sequence[str],
        reason: str,
        local_epochs: int | None = None,
        fresh_order: bool = False,
    ) -> dict[str, Secret]:
        """Ask `clients` for their exact gradient at `model` (unlearning round t, data order
        of stored round `original_round` or a fresh one, `local_epochs` if given); clients
        that do not answer are recorded."""
        if not clients:
            return {}
        request = GradientRequest(
            model=model,
            unlearning_round=t,
            original_round=original_round,
            clients=tuple(clients),
            reason=reason,
            local_epochs=local_epochs,
            fresh_order=fresh_order,
        )
        answers = self.ctx.oracle.exact_gradients(self.ctx.backend, request)
        got: dict[str, Secret] = {}
        for c in clients:
            value = answers.get(c)
            if value is None:
                self.missing.append({"round": t, "client": c, "reason": reason})
                continue
            if tuple(value.shape) != (self._dim,):
                raise UnlearningError(
                    f"oracle returned a gradient of shape {tuple(value.shape)} for client {c!r}, "
                    f"expected ({self._dim},)"
                )
            (self.target_rounds if c in self.target_rounds else self.rounds_asked)[c].add(t)
            got[c] = value
        return got

    def arp(self) -> float:
        """Average round-saving percentage over remaining clients, (T − T_r)/T × 100."""
        total = self.ctx.history.num_rounds
        if not self.remaining or total == 0:
            return 0.0
        saved = [(total - len(self.rounds_asked[c])) / total for c in self.remaining]
        return 100.0 * sum(saved) / len(saved)

    def report(self, params: StrategyParams, **extra: Any) -> dict[str, Any]:
        """The JSON-ready report every baseline returns."""
        report: dict[str, Any] = {
            "strategy": self.strategy,
            "backend": self.ctx.backend.name,
            "targets": list(self.ctx.targets),
            "params": params.as_dict,
            "stored_rounds": self.ctx.history.num_rounds,
            "rounds_used": self.rounds_used,
            "client_rounds": {c: len(r) for c, r in self.rounds_asked.items()},
            "target_rounds": {c: len(r) for c, r in self.target_rounds.items()},
            "arp": self.arp(),
            "missing_answers": self.missing,
            "timings": {"total_seconds": time.perf_counter() - self._start, "steps": dict(self.seconds)},
        }
        report.update(extra)
        return report


def norm_calibrated_update(
    stored_norms: Mapping[str, float], fresh: Mapping[str, torch.Tensor], weights: Mapping[str, float]
) -> torch.Tensor:
    """Σ_c w_c · ‖g_c‖/‖ĝ_c‖ · ĝ_c: the stored update's length ‖g_c‖ (`stored_norms`), the
    fresh update's direction (FedEraser's calibration; Crab eq. (8)–(10)). A zero fresh
    update contributes nothing."""
    total = torch.zeros_like(next(iter(fresh.values())), dtype=torch.float64)
    for c, g_hat in fresh.items():
        norm_hat = float(g_hat.norm())
        if norm_hat > 0.0:
            total += weights[c] * stored_norms[c] / norm_hat * g_hat.to(torch.float64)
    return total
