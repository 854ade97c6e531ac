"""Clients that privatize their uploads with FedADP's adaptive Gaussian mechanism.

FedADP (Algorithm 1) trains with differential privacy: in round t the server sends a
budget ε_t, every client clips its update to norm S and adds N(0, σ_t²·I) with
σ_t = S·√(2 ln(1.25/δ))/ε_t (lines 10–12, eq. (5)–(6)), the server aggregates the noised
uploads (lines 15–16), and the next budget follows the loss change,
ε_{t+1} = min(max(ε_t·e^{|loss_{t−1} − loss_t|}, ε_min), ε_max) (lines 25–26, eq. (4)).

`UploadPrivatizer` is that mechanism for the simulator's Stage I: `run_fedavg` hands it
each round's clean pseudo-gradients and aggregates what it returns, so the stored
uploads, their norms and thresholds, and the global models all come from privatized
uploads, exactly as in the paper's training. The loss that drives the budget is the
probe loss F(M) (`evaluation.dataset_probe.DatasetProbe`), the same F the FedADP strategy reads
its windows from. The history then declares the mechanism (`UploadPrivacy`) so FedADP
knows its uploads are already private. Noise comes from `fedadp.noise_generator` keyed
by (noise seed, round, client slot): a reproducible simulation; a deployment draws it on
the client from a CSPRNG.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch

from privacy.adaptive import next_budget, noise_generator, noise_std, privatize
from unlearning.history import UploadPrivacy


@dataclass
class UploadPrivatizer:
    """Privatizes each round's uploads (module docstring) and records the budgets used."""

    clip_norm: float  #: S
    delta: float  #: δ
    epsilon_0: float  #: ε_0, the budget of round 1
    epsilon_min: float
    epsilon_max: float
    noise_seed: int
    loss: Callable[[torch.Tensor], float]  #: F(M), the loss the budget follows
    client_slots: Mapping[str, int]  #: client id → its position in the federation (noise key)
    losses: list[float] = field(default_factory=list)  #: F(M_0), F(M_1), ... as seen so far
    budgets: list[float] = field(default_factory=list)  #: ε_1, ε_2, ...
    stds: list[float] = field(default_factory=list)  #: σ_1, σ_2, ...

    def __call__(self, i: int, model: torch.Tensor, grads: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The privatized uploads of round i, whose clients started from `model` = M_{i−1}."""
        if i != len(self.budgets) + 1:
            raise ValueError(f"rounds must be privatized in order: expected {len(self.budgets) + 1}, got {i}")
        self.losses.append(self.loss(model))
        if i == 1:
            epsilon = self.epsilon_0
        else:
            previous, current = self.losses[-2], self.losses[-1]
            epsilon = next_budget(self.budgets[-1], previous, current, self.epsilon_min, self.epsilon_max)
        std = noise_std(self.clip_norm, self.delta, epsilon)
        self.budgets.append(epsilon)
        self.stds.append(std)
        slots, seed = self.client_slots, self.noise_seed
        return {
            c: privatize(g, self.clip_norm, std, noise_generator(seed, i, slots[c])).to(torch.float32)
            for c, g in grads.items()
        }

    def declaration(self) -> UploadPrivacy:
        """What the history declares about its uploads."""
        return UploadPrivacy(
            mechanism="gaussian",
            clip_norm=self.clip_norm,
            delta=self.delta,
            budgets=tuple(self.budgets),
            noise_std=tuple(self.stds),
        )
