"""Party-side function for the benchmark tests (its own module so spawned parties can import it)."""

from __future__ import annotations

import torch

from bench.histories import seeded_share


def seeded_share_case(backend, rank: int, x: torch.Tensor) -> dict:
    """Each party derives its own share of x; returns the reveal and this party's raw share."""
    secret = seeded_share(backend, x, "test", 1)
    return {"revealed": backend.reveal(secret), "share": secret.share.clone()}
