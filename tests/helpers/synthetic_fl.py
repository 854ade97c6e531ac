"""A tiny federated logistic-regression problem shared by the unlearning tests.

`LogRegFL` holds per-client data for binary logistic regression with an L2 term (strongly
convex, full-batch gradients, so "the exact gradient at M̂" is deterministic). It trains
FedAvg to produce an `InMemoryHistory` exactly as Stage I would store it, and provides a
`GradientOracle` (`LogRegOracle`) and a `ModelProbe` (`LogRegProbe`) over the same data.
Client "c0" has flipped labels, so forgetting it visibly changes the model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from mpc.backend import Backend, Secret
from mpc.plain_backend import PlainBackend
from unlearning.history import GradientOracle, GradientRequest, InMemoryHistory, RoundInfo
from unlearning.probes import ModelProbe
from unlearning.strategy import UnlearnContext

L2 = 1e-2  #: ridge term of the synthetic objective


@dataclass
class LogRegFL:
    """Clients' data X_j (n_j, d), y_j ∈ {0,1}; f_j(w) = mean logistic loss + L2/2·‖w‖²."""

    data: dict[str, tuple[torch.Tensor, torch.Tensor]]
    probe_x: torch.Tensor
    probe_y: torch.Tensor

    @classmethod
    def make(cls, n_clients: int = 5, dim: int = 6, seed: int = 0, flip: Sequence[str] = ("c0",)) -> LogRegFL:
        gen = torch.Generator().manual_seed(seed)
        w_true = torch.randn(dim, generator=gen, dtype=torch.float64)

        def sample(n: int, flipped: bool) -> tuple[torch.Tensor, torch.Tensor]:
            x = torch.randn(n, dim, generator=gen, dtype=torch.float64)
            y = ((x @ w_true + 0.3 * torch.randn(n, generator=gen, dtype=torch.float64)) > 0).to(torch.float64)
            return x, (1.0 - y) if flipped else y

        data = {f"c{k}": sample(20 + 4 * k, f"c{k}" in flip) for k in range(n_clients)}
        px, py = sample(64, False)
        return cls(data=data, probe_x=px, probe_y=py)

    @property
    def clients(self) -> list[str]:
        return sorted(self.data)

    def n(self, client: str) -> int:
        return int(self.data[client][0].shape[0])

    def gradient(self, client: str, model: torch.Tensor) -> torch.Tensor:
        x, y = self.data[client]
        w = model.to(torch.float64)
        return x.T @ (torch.sigmoid(x @ w) - y) / x.shape[0] + L2 * w

    def loss(self, client: str, model: torch.Tensor) -> float:
        x, y = self.data[client]
        z = x @ model.to(torch.float64)
        return float(torch.nn.functional.binary_cross_entropy_with_logits(z, y)) + L2 / 2 * float(
            model.double().norm() ** 2
        )

    def fedavg(
        self, rounds: int, lr: float, clients: Sequence[str] | None = None, start: torch.Tensor | None = None
    ) -> list[torch.Tensor]:
        """Independent reference FedAvg (float32 models, as stored); returns M_0..M_rounds."""
        members = list(clients) if clients is not None else self.clients
        model = start.clone() if start is not None else torch.zeros(self.probe_x.shape[1], dtype=torch.float32)
        models = [model]
        total = sum(self.n(c) for c in members)
        for _ in range(rounds):
            g = sum(self.n(c) / total * self.gradient(c, model) for c in members)
            model = (model.double() - lr * g).float()
            models.append(model)
        return models

    def history(self, backend: Backend, rounds: int = 8, lr: float = 0.5, alpha: float = 0.4) -> InMemoryHistory:
        """Stage I: FedAvg over every client, storing gradients, norms and δ_i^j."""
        models = self.fedavg(rounds, lr)
        infos, grads, norms, deltas = [], {}, {}, {}
        for i in range(1, rounds + 1):
            infos.append(
                RoundInfo(index=i, clients=tuple(self.clients), n_samples={c: self.n(c) for c in self.clients}, lr=lr)
            )
            for c in self.clients:
                g = self.gradient(c, models[i - 1])
                grads[(i, c)] = backend.share(g)
                norms[(i, c)] = backend.share(g.norm().reshape(()))
                deltas[(i, c)] = backend.share(torch.quantile(g.abs(), 1 - alpha).reshape(()))
        return InMemoryHistory(models=models, infos=infos, grads=grads, grad_norms=norms, deltas=deltas)


@dataclass
class LogRegOracle(GradientOracle):
    """Remaining clients answer with their exact full-batch gradient at the requested model."""

    problem: LogRegFL
    silent: frozenset[str] = frozenset()  #: clients that never answer
    requests: list[GradientRequest] = field(default_factory=list)

    def exact_gradients(self, backend: Backend, request: GradientRequest) -> Mapping[str, Secret | None]:
        self.requests.append(request)
        return {
            c: None if c in self.silent else backend.share(self.problem.gradient(c, request.model))
            for c in request.clients
        }


@dataclass
class LogRegProbe(ModelProbe):
    """p(M) = [σ(x·w), 1 − σ(x·w)] and the mean logistic loss on the problem's probe set."""

    problem: LogRegFL

    def probabilities(self, model: torch.Tensor) -> torch.Tensor:
        p = torch.sigmoid(self.problem.probe_x @ model.to(torch.float64))
        return torch.stack([p, 1 - p], dim=1)

    def loss(self, model: torch.Tensor) -> float:
        z = self.problem.probe_x @ model.to(torch.float64)
        return float(torch.nn.functional.binary_cross_entropy_with_logits(z, self.problem.probe_y))

    def accuracy(self, model: torch.Tensor) -> float:
        predicted = (self.problem.probe_x @ model.to(torch.float64) > 0).to(torch.float64)
        return float((predicted == self.problem.probe_y).to(torch.float64).mean())


@dataclass
class LogRegSetup:
    """A trained history with its oracle and probe, ready to build contexts."""

    problem: LogRegFL
    backend: Backend
    history: InMemoryHistory
    oracle: LogRegOracle
    probe: LogRegProbe

    def context(
        self, targets: Sequence[str] = ("c0",), params: Mapping[str, Any] | None = None, with_probe: bool = True
    ) -> UnlearnContext:
        return UnlearnContext(
            backend=self.backend,
            history=self.history,
            oracle=self.oracle,
            targets=tuple(targets),
            params=dict(params or {}),
            probe=self.probe if with_probe else None,
        )


def make_logreg_setup(rounds: int = 8, lr: float = 0.5, seed: int = 0, n_clients: int = 5) -> LogRegSetup:
    problem = LogRegFL.make(n_clients=n_clients, seed=seed)
    backend = PlainBackend()
    history = problem.history(backend, rounds=rounds, lr=lr)
    return LogRegSetup(problem, backend, history, LogRegOracle(problem), LogRegProbe(problem))


def history_from_gradients(
    backend: Backend,
    start: torch.Tensor,
    table: Sequence[Mapping[str, torch.Tensor]],
    n_samples: Mapping[str, int],
    lr: float,
) -> InMemoryHistory:
    """A history built from explicit per-round client gradients: M_i = M_{i−1} − η·FedAvg(g_i)."""
    models, infos, grads, norms, deltas = [start.to(torch.float32)], [], {}, {}, {}
    for i, row in enumerate(table, start=1):
        clients = tuple(sorted(row))
        total = sum(n_samples[c] for c in clients)
        update = sum(n_samples[c] / total * row[c].to(torch.float64) for c in clients)
        models.append((models[-1].double() - lr * update).float())
        infos.append(RoundInfo(index=i, clients=clients, n_samples={c: n_samples[c] for c in clients}, lr=lr))
        for c in clients:
            g = row[c].to(torch.float64)
            grads[(i, c)] = backend.share(g)
            norms[(i, c)] = backend.share(g.norm().reshape(()))
            deltas[(i, c)] = backend.share(g.abs().max().reshape(()))
    return InMemoryHistory(models=models, infos=infos, grads=grads, grad_norms=norms, deltas=deltas)


@dataclass
class TableOracle(GradientOracle):
    """Answers with a fixed gradient per (original round, client), whatever the model."""

    table: Sequence[Mapping[str, torch.Tensor]]
    requests: list[GradientRequest] = field(default_factory=list)

    def exact_gradients(self, backend: Backend, request: GradientRequest) -> Mapping[str, Secret | None]:
        self.requests.append(request)
        row = self.table[request.original_round - 1]
        return {c: backend.share(row[c].to(torch.float64)) for c in request.clients}


def fixed_noise(backend: Backend, m: int, key: bytes = b"") -> Secret:
    """A fixed u ~ N(0, I_m) draw for the anchored reveal (unlearning/starfish/anchor_noise.py), shared as
    a public value: two backends, or a run and its resumption, then add the very same noise
    (whatever the reveal's `key`)."""
    gen = torch.Generator().manual_seed(20_261_128)
    return backend.add(backend.zeros((m,)), torch.randn(m, generator=gen, dtype=torch.float64))
