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
noise multiplier, members, cohort size) for the accountant (`privacy.accountant`).

Schedules of z: "fixed" keeps z; "fedadp" follows FedADP's adaptive calibration
(Algorithm 1 lines 25–26, eq. (4), (6)): the step budget ε_t = √(2 ln(1.25/δ))/z_t moves
to ε_(t+1) = min(max(ε_t·e^|s_(t−1) − s_t|, ε_0), 2ε_0), where s_t = ‖G_t‖ is the norm of
the released aggregate — a public stand-in for the loss the parties cannot evaluate
(post-processing of released values, so it costs no privacy) — and z_(t+1) =
√(2 ln(1.25/δ))/ε_(t+1). The accountant composes the actual z_t of each release (RDP).

torch is imported inside the methods that touch tensors; the Backend is only a type here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from privacy.adaptive import next_budget
from privacy.release_log import Release
from privacy.settings import FEDADP_MAX_GROWTH, DPSettings

if TYPE_CHECKING:
    import torch

    from mpc.backend import Backend, Secret


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
        import torch

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
        import torch

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
