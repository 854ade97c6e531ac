"""Stage I under the optional distributed DP of the service, simulated (docs/PRIVACY.md).

What the deployment does each round i (`server.stage1_clip`): the parties clip every
member's gradient to norm C inside 2PC (g̃_j = g_j·min(1, C/‖g_j‖)), form G_i = Σ_j w_j·g̃_j
in shares, and each party adds its own N(0, σ²) with σ = z·C·max_j w_j to its share before
the opening, so the published model M_i = M_(i−1) − η·(G_i + n_0 + n_1) carries noise that
the honest party alone makes a Gaussian mechanism with multiplier z.

`simulate_private` records that history with clients that also clip before sharing
(`client_sdk.stats.clip_to_norm`, the SDK's `clip_norm`; clipping again changes nothing), so
the stored uploads are the clipped ones (what Stage II reads); the models carry both
parties' noise (variance 2σ²), drawn from a
generator seeded by (seed, round) so the simulation is reproducible. It returns the
rounds as `Release`s for the accountant.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from client_sdk.stats import clip_to_norm, l2_norm, tolerance_threshold
from evaluation.models import initial_model
from evaluation.simulator import RoundCallback, SimulationConfig, SimulationResult, build_federation
from evaluation.training import apply_update, fedavg, train_round
from privacy.release_log import Release
from privacy.settings import DPSettings

PARTIES = 2  #: each party adds its own noise


def simulate_private(
    config: SimulationConfig, settings: DPSettings, on_round: RoundCallback | None = None
) -> tuple[SimulationResult, list[Release]]:
    """Stage I with clipped uploads and distributed noise on every aggregate (module docstring)."""
    fed = build_federation(config)
    cfg = fed.config
    models = [initial_model(cfg.architecture, cfg.seed)]
    ids = [c.client_id for c in fed.clients]
    grads = np.zeros((cfg.rounds, len(ids), models[0].numel()), dtype=np.float32)
    norms, deltas = np.zeros((cfg.rounds, len(ids))), np.zeros((cfg.rounds, len(ids)))
    n = fed.n_samples
    max_weight = max(n.values()) / sum(n.values())
    sigma = settings.noise_multiplier * settings.clip * max_weight
    releases: list[Release] = []
    start = time.perf_counter()
    for i in range(1, cfg.rounds + 1):
        uploads = {
            c: torch.from_numpy(clip_to_norm(g.numpy(), settings.clip))
            for c, g in train_round(fed.trainer, models[-1], fed.clients, i, cfg.seed).items()
        }
        gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + i)
        noise = sum(torch.randn(models[0].shape, generator=gen, dtype=torch.float64) * sigma for _ in range(PARTIES))
        models.append(apply_update(models[-1], fedavg(uploads, n) + noise, cfg.lr))
        releases.append(Release(f"stage1 round {i}", settings.noise_multiplier, tuple(ids)))
        for j, cid in enumerate(ids):
            grads[i - 1, j] = uploads[cid].numpy()
            norms[i - 1, j] = l2_norm(grads[i - 1, j])
            deltas[i - 1, j] = tolerance_threshold(grads[i - 1, j], cfg.tolerance_rate)
        if on_round is not None:
            on_round(i, cfg.rounds)
    result = SimulationResult(fed, models, grads, norms, deltas, time.perf_counter() - start)
    return result, releases
