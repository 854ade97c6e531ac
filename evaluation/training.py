"""Local training of one client and the FedAvg step (Stage I; docs/SERVICE.md, "Round protocol").

A client starting from the global model M_{i−1} runs `epochs` passes of plain SGD
(no momentum, no weight decay) with learning rate η_l and batch size b over its data,
reaching M_local, and uploads the pseudo-gradient

    g_i^j = (M_{i−1} − M_local) / η_l                                  (docs/SERVICE.md)

The server aggregates G_i = Σ_j n_j g_i^j / Σ_j n_j and sets M_i = M_{i−1} − η_l·G_i.

The data order of client j in round i comes from a generator seeded by
(experiment seed, j, i), so the same client asked again "for round i" (retraining,
warm-up, correction) visits its samples in the same order.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from evaluation.models import build_model, set_flat

#: intra-op threads for simulated training; one thread per process was up to 100× faster
#: than two on a loaded 2-core machine (small batches spin-wait for each other)
DEFAULT_THREADS = 1


@contextmanager
def torch_threads(n: int = DEFAULT_THREADS) -> Iterator[None]:
    """Run the enclosed block with `n` torch intra-op threads, restoring the old count."""
    if n < 1:
        raise ValueError(f"thread count must be ≥ 1; got {n}")
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


@dataclass(frozen=True)
class ClientData:
    """One client's local training set (never leaves the client)."""

    client_id: str
    index: int  #: position in the federation, used to seed its data order
    x: torch.Tensor  #: (n, C, H, W) float32
    y: torch.Tensor  #: (n,) int64

    @property
    def n_samples(self) -> int:
        return int(self.y.shape[0])


def order_seed(seed: int, client_index: int, round_index: int) -> int:
    """Seed of client `client_index`'s data order in round `round_index`."""
    return int(np.random.SeedSequence([seed, client_index, round_index]).generate_state(1, dtype=np.uint64)[0] >> 1)


#: separates fresh data orders from the orders of stored rounds
FRESH_ORDER_TAG = 0x46524553


def fresh_order_seed(seed: int, client_index: int, original_round: int, unlearning_round: int) -> int:
    """Seed of a data order no stored round used: a new FL round asked for during unlearning
    round `unlearning_round` (replacing `original_round`), reproducible from the same keys."""
    keys = [seed, client_index, FRESH_ORDER_TAG, original_round, unlearning_round]
    return int(np.random.SeedSequence(keys).generate_state(1, dtype=np.uint64)[0] >> 1)


class LocalTrainer:
    """Runs a client's local SGD and returns its pseudo-gradient."""

    def __init__(self, architecture: str, lr: float, epochs: int, batch_size: int) -> None:
        if lr <= 0 or epochs < 1 or batch_size < 1:
            raise ValueError(f"need lr > 0, epochs ≥ 1, batch ≥ 1; got {lr}, {epochs}, {batch_size}")
        self.architecture = architecture
        self.lr = lr
        self.epochs = epochs
        self.batch_size = batch_size
        self._module = build_model(architecture)

    def pseudo_gradient(
        self, model: torch.Tensor, client: ClientData, seed: int, epochs: int | None = None
    ) -> torch.Tensor:
        """(M − M_local)/η_l after `epochs` SGD passes (default: the trainer's) from `model`
        in the order fixed by `seed`."""
        passes = self.epochs if epochs is None else epochs
        if passes < 1:
            raise ValueError(f"need at least one local epoch; got {passes}")
        start = torch.as_tensor(model, dtype=torch.float32)
        module = self._module
        set_flat(module, start)
        module.train()
        gen = torch.Generator().manual_seed(seed)
        params = list(module.parameters())
        for _ in range(passes):
            perm = torch.randperm(client.n_samples, generator=gen)
            for b in range(0, client.n_samples, self.batch_size):
                idx = perm[b : b + self.batch_size]
                for p in params:
                    p.grad = None
                F.cross_entropy(module(client.x[idx]), client.y[idx]).backward()
                with torch.no_grad():
                    for p in params:
                        p.add_(p.grad, alpha=-self.lr)
        local = torch.nn.utils.parameters_to_vector(params).detach()
        return (start - local) / self.lr


def fedavg(gradients: Mapping[str, torch.Tensor], n_samples: Mapping[str, int]) -> torch.Tensor:
    """G = Σ_j n_j g^j / Σ_j n_j, accumulated in float64."""
    if not gradients:
        raise ValueError("no gradients to aggregate")
    total = sum(n_samples[c] for c in gradients)
    acc = torch.zeros_like(next(iter(gradients.values())), dtype=torch.float64)
    for c, g in gradients.items():
        acc += n_samples[c] * g.to(torch.float64)
    return acc / total


def apply_update(model: torch.Tensor, aggregate: torch.Tensor, lr: float) -> torch.Tensor:
    """M_i = M_{i−1} − η_l·G_i (computed in float64, stored as float32)."""
    return (model.to(torch.float64) - lr * aggregate.to(torch.float64)).to(torch.float32)


def train_round(
    trainer: LocalTrainer, model: torch.Tensor, clients: Sequence[ClientData], round_index: int, seed: int
) -> dict[str, torch.Tensor]:
    """Every client's pseudo-gradient for round `round_index` starting at `model`."""
    return {c.client_id: trainer.pseudo_gradient(model, c, order_seed(seed, c.index, round_index)) for c in clients}
