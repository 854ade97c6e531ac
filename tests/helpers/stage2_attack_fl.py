"""A small non-IID federated logistic regression for the Stage II attack tests.

Each client draws labels from its own weight vector, so the clients' gradients point in
different directions (an attack that returns "some client's gradient" is not mistaken for
the right one). Gradients are full batch: a client's exact gradient at a model does not
depend on the replayed round, the most favourable case for differencing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch

from mpc.backend import Backend, Secret
from unlearning.history import GradientOracle, GradientRequest, InMemoryHistory, RoundInfo

L2 = 1e-2


@dataclass
class NonIIDLogReg:
    """Clients' data X_j (n_j, d), y_j ∈ {0, 1}; f_j(w) = mean logistic loss + L2/2·‖w‖²."""

    data: dict[str, tuple[torch.Tensor, torch.Tensor]]

    @classmethod
    def make(cls, n_clients: int, dim: int = 8, seed: int = 0) -> NonIIDLogReg:
        gen = torch.Generator().manual_seed(seed)
        data = {}
        for k in range(n_clients):
            w = 2.0 * torch.randn(dim, generator=gen, dtype=torch.float64)
            x = torch.randn(16 + 3 * k, dim, generator=gen, dtype=torch.float64)
            data[f"c{k}"] = (x, (x @ w > 0).to(torch.float64))
        return cls(data)

    def n(self, client: str) -> int:
        return int(self.data[client][0].shape[0])

    def gradient(self, client: str, model: torch.Tensor) -> torch.Tensor:
        x, y = self.data[client]
        w = model.to(torch.float64)
        return x.T @ (torch.sigmoid(x @ w) - y) / x.shape[0] + L2 * w

    def history(self, backend: Backend, members: Sequence[Sequence[str]], lr: float) -> InMemoryHistory:
        """Stage I: round i aggregates the clients members[i−1] (FedAvg), storing what Stage I stores."""
        dim = next(iter(self.data.values()))[0].shape[1]
        models = [torch.zeros(dim, dtype=torch.float32)]
        infos, grads, norms, deltas = [], {}, {}, {}
        for i, clients in enumerate(members, start=1):
            total = sum(self.n(c) for c in clients)
            step = torch.zeros(dim, dtype=torch.float64)
            for c in clients:
                g = self.gradient(c, models[-1])
                step += self.n(c) / total * g
                grads[(i, c)] = backend.share(g)
                norms[(i, c)] = backend.share(g.norm().reshape(()))
                deltas[(i, c)] = backend.share(g.abs().max().reshape(()))
            models.append((models[-1].double() - lr * step).float())
            infos.append(RoundInfo(index=i, clients=tuple(clients), n_samples={c: self.n(c) for c in clients}, lr=lr))
        return InMemoryHistory(models=models, infos=infos, grads=grads, grad_norms=norms, deltas=deltas)


@dataclass
class ExactOracle(GradientOracle):
    """Remaining clients answer with their exact full-batch gradient at the requested model."""

    problem: NonIIDLogReg
    requests: list[GradientRequest] = field(default_factory=list)

    def exact_gradients(self, backend: Backend, request: GradientRequest) -> Mapping[str, Secret | None]:
        self.requests.append(request)
        return {c: backend.share(self.problem.gradient(c, request.model)) for c in request.clients}
