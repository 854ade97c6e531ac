"""FedADP's adaptive Gaussian mechanism (FedADP paper, Algorithm 1 lines 8–12 and 25–26).

Budget schedule (eq. (4)): after a round the budget follows the loss change,
ε_(t+1) = min(max(ε_t·e^|loss_(t−1) − loss_t|, ε_min), ε_max). Noise (eq. (6)):
σ_t = S·√(2 ln(1.25/δ))/ε_t. Clip and noise (eq. (5)): g̃ = g/max(1, ‖g‖/S) + N(0, σ_t²·I).
Used by the FedADP baseline (`unlearning.baselines.fedadp`), the clients of the simulator
that privatize their uploads (`evaluation.upload_dp`) and the "fedadp" schedule of the
distributed mechanism (`privacy.distributed`). torch is imported only by the two functions
that make tensors.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def next_budget(epsilon: float, previous_loss: float, loss: float, epsilon_min: float, epsilon_max: float) -> float:
    """ε_{t+1} = min(max(ε_t·e^{Δloss}, ε_min), ε_max), Δloss = |loss_{t−1} − loss_t| (eq. (4);
    Algorithm 1, lines 25–26)."""
    return min(max(epsilon * math.exp(abs(previous_loss - loss)), epsilon_min), epsilon_max)


def budget_schedule(losses: Sequence[float], epsilon_0: float, epsilon_min: float, epsilon_max: float) -> list[float]:
    """Budgets ε_1..ε_T of stored rounds 1..T from losses F(M_0..M_T) (eq. (4)):
    round 1 uses ε_0; ε_{i+1} = next_budget(ε_i, F(M_{i−1}), F(M_i))."""
    budgets = [epsilon_0]
    for i in range(1, len(losses) - 1):
        budgets.append(next_budget(budgets[-1], losses[i - 1], losses[i], epsilon_min, epsilon_max))
    return budgets


def noise_std(clip_norm: float, dp_delta: float, epsilon: float) -> float:
    """σ_t = S·√(2 ln(1.25/δ)) / ε_t (eq. (6))."""
    return clip_norm * math.sqrt(2.0 * math.log(1.25 / dp_delta)) / epsilon


def privatize(g: torch.Tensor, clip_norm: float, std: float, generator: torch.Generator) -> torch.Tensor:
    """g / max(1, ‖g‖/S) + N(0, std²·I) (eq. (5), Algorithm 1 line 12)."""
    import torch

    g64 = g.to(torch.float64)
    clipped = g64 / max(1.0, float(g64.norm()) / clip_norm)
    return clipped + std * torch.randn(g64.shape, generator=generator, dtype=torch.float64)


def noise_generator(seed: int, round_index: int, client_index: int) -> torch.Generator:
    """The generator of one stored update's noise, a function of (seed, round, client slot)."""
    import torch

    mixed = (seed * 0x9E3779B97F4A7C15 + round_index * 0xBF58476D1CE4E5B9 + client_index * 0x94D049BB133111EB) % (2**63)
    return torch.Generator().manual_seed(mixed)
