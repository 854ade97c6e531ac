"""Optional distributed differential privacy on every revealed aggregate (docs/PRIVACY.md).

When a run carries a `PrivateAggregator`, `unlearning.fedavg.reveal_aggregate` hands it
the stacked secret gradients and their public weights instead of opening Σ_j w_j·[g_j]:

1. SecClip (`mpc/protocols/secclip.py`): [g̃_j] = [g_j]·min(1, C/‖g_j‖) inside 2PC;
2. G = Σ_j w_j·[g̃_j] (local, public weights);
3. `Backend.reveal_noised(G, σ)` with σ = z·C·max_j w_j: each party adds N(0, σ²) to its
   share before opening, so the honest party's noise alone is the Gaussian mechanism.

With the weights public and fixed, adding or removing one client's clipped contribution
moves G by at most max_j w_j·C (the L2 sensitivity), so each release is the Gaussian
mechanism with noise multiplier z on that client. Every release is logged (`Release`:
noise multiplier, members, cohort size) for the accountant (`unlearning.dp_accounting`).

Schedules of z: "fixed" keeps z; "fedadp" follows FedADP's adaptive calibration
(Algorithm 1 lines 25–26, eq. (4), (6)): the step budget ε_t = √(2 ln(1.25/δ))/z_t moves
to ε_(t+1) = min(max(ε_t·e^|s_(t−1) − s_t|, ε_0), 2ε_0), where s_t = ‖G_t‖ is the norm of
the released aggregate — a public stand-in for the loss the parties cannot evaluate
(post-processing of released values, so it costs no privacy) — and z_(t+1) =
√(2 ln(1.25/δ))/ε_(t+1). The accountant composes the actual z_t of each release (RDP).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from mpc.backend import Backend, Secret
from unlearning.baselines.fedadp import next_budget

SCHEDULES = ("fixed", "fedadp")
FEDADP_MAX_GROWTH = 2.0
"""ε_max / ε_0 of the "fedadp" schedule: the step budget may at most double (noise halve)."""


@dataclass(frozen=True)
class DPSettings:
    """Clipping norm C, noise multiplier z, δ, and the schedule of z (module docstring)."""

    clip: float
    noise_multiplier: float
    delta: float
    schedule: str = "fixed"

    def __post_init__(self) -> None:
        if not math.isfinite(self.clip) or self.clip <= 0:
            raise ValueError(f"privacy.clip must be a finite number > 0, got {self.clip!r}")
        if not math.isfinite(self.noise_multiplier) or self.noise_multiplier < 0:
            raise ValueError(f"privacy.noise_multiplier must be a finite number >= 0, got {self.noise_multiplier!r}")
        if not 0 < self.delta < 1:
            raise ValueError(f"privacy.delta must be in (0, 1), got {self.delta!r}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"privacy.schedule must be one of {list(SCHEDULES)}, got {self.schedule!r}")
        if self.schedule == "fedadp" and self.noise_multiplier == 0:
            raise ValueError("privacy.schedule = 'fedadp' needs privacy.noise_multiplier > 0")


@dataclass(frozen=True)
class Release:
    """One published aggregate: what it is, its noise multiplier, and who is in it."""

    label: str
    noise_multiplier: float
    members: tuple[str, ...]

    @property
    def cohort(self) -> int:
        return len(self.members)

    def as_dict(self) -> dict[str, object]:
        return {"label": self.label, "noise_multiplier": self.noise_multiplier, "cohort": self.cohort}


@dataclass
class PrivateAggregator:
    """Clip, aggregate and open with distributed noise; logs each release (module docstring)."""

    settings: DPSettings
    releases: list[Release] = field(default_factory=list)
    _multiplier: float = field(init=False)
    _last_norm: float | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self._multiplier = self.settings.noise_multiplier

    @property
    def noise_multiplier(self) -> float:
        """z of the next release."""
        return self._multiplier

    def restore(self, releases: Sequence[Release]) -> None:
        """Continue after a checkpoint: its release log, and the last release's z (the "fedadp"
        schedule resumes from it without a previous norm, so its first step keeps z)."""
        self.releases = list(releases)
        self._multiplier = releases[-1].noise_multiplier if releases else self.settings.noise_multiplier
        self._last_norm = None

    def reveal(
        self, backend: Backend, gradients: Secret, weights: Sequence[float], members: Sequence[str], label: str
    ) -> torch.Tensor:
        """Steps 1–3 for stacked gradients (n, m) with n public weights; returns the noised G (m,)."""
        total, sensitivity = self.clipped_sum(backend, gradients, weights)
        return self.reveal_sum(backend, total, sensitivity, members, label)

    def clipped_sum(self, backend: Backend, gradients: Secret, weights: Sequence[float]) -> tuple[Secret, float]:
        """Steps 1–2: [Σ_j w_j·g̃_j] kept secret, and its L2 sensitivity C·max_j |w_j|."""
        w = torch.tensor([float(x) for x in weights], dtype=torch.float64)
        clipped = backend.clip_norm(gradients, self.settings.clip)
        return backend.matmul(w, clipped), self.settings.clip * float(w.abs().max())

    def reveal_sum(
        self,
        backend: Backend,
        total: Secret,
        sensitivity: float,
        members: Sequence[str],
        label: str,
        noise_key: bytes | None = None,
    ) -> torch.Tensor:
        """Step 3 for a secret sum of clipped aggregates whose sensitivities add up to
        `sensitivity` (a client in several merged steps moves each by its own bound):
        σ = z·sensitivity. With `noise_key` this party's draw is keyed (a repeated release
        under the key repeats the draw; Stage I, `server.stage1_dp`)."""
        sigma = self._multiplier * sensitivity
        released = backend.reveal_noised(total, sigma, noise_key).to(torch.float64)
        self.releases.append(Release(label, self._multiplier, tuple(members)))
        self._advance(float(torch.linalg.vector_norm(released)))
        return released

    def _advance(self, norm: float) -> None:
        """The "fedadp" schedule's next z from the released norms (module docstring)."""
        previous, self._last_norm = self._last_norm, norm
        if self.settings.schedule != "fedadp" or previous is None:
            return
        scale = math.sqrt(2.0 * math.log(1.25 / self.settings.delta))
        epsilon_0 = scale / self.settings.noise_multiplier
        epsilon = next_budget(scale / self._multiplier, previous, norm, epsilon_0, FEDADP_MAX_GROWTH * epsilon_0)
        self._multiplier = scale / epsilon
