"""Random round selection: Starfish with its round selection replaced by a random draw.

What the paper does (Starfish §VI-A, baselines): "given a selection rate σ, distinct from
the cosine similarity-based round selection, the servers randomly choose T′ rounds, upon
which they initiate the unlearning process." It isolates the value of SecRS (Algorithm 1):
everything else — threshold determination, warm-up, SecUE, SecTC every T_c rounds and
correction (Algorithm 4) — is Starfish's.

What we implement. `RandomSelectionStrategy` is `StarfishStrategy` with one step
replaced: T′ = ⌈σT⌉ distinct rounds are drawn uniformly with a seeded generator
(`seed` parameter; the draw is public, so both parties draw the same rounds from the
same seed and nothing about the target is computed or revealed for the selection).
All other parameters are Starfish's (`unlearning.starfish.params`), and so are the
backends it runs on (plaintext or 2PC) and its report ("selection.method" = "random").
"""

from __future__ import annotations

import random
from typing import Any, Mapping

import torch

from unlearning.starfish.params import StarfishParams
from unlearning.starfish.state import StarfishState
from unlearning.starfish.strategy import StarfishStrategy
from unlearning.starfish.threshold import determine_thresholds
from unlearning.strategy import UnlearnContext, UnlearningError

NAME = "random"
SEED_KEY = "seed"


def random_rounds(total: int, count: int, seed: int) -> tuple[int, ...]:
    """`count` distinct rounds of 1..`total`, uniformly at random, reproducible from `seed`."""
    if not 1 <= count <= total:
        raise UnlearningError(f"cannot select {count} of {total} rounds")
    return tuple(random.Random(seed).sample(range(1, total + 1), count))


def selection_seed(params: Mapping[str, Any]) -> int:
    """The request's `seed` (default 0); an integer is required."""
    seed = params.get(SEED_KEY, 0)
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise UnlearningError(f"{NAME}: parameter 'seed' must be int, got {seed!r}")
    return seed


class RandomSelectionStrategy(StarfishStrategy):
    """Starfish (Algorithm 4) over ⌈σT⌉ uniformly drawn rounds."""

    name = NAME
    requires_plaintext = False

    def params(self, ctx: UnlearnContext) -> StarfishParams:
        selection_seed(ctx.params)
        return StarfishParams.from_mapping({k: v for k, v in ctx.params.items() if k != SEED_KEY})

    def _start(self, ctx: UnlearnContext, params: StarfishParams) -> StarfishState:
        """`StarfishStrategy._start` with the random draw in place of SecRS (same state layout)."""
        total = ctx.history.num_rounds
        count = params.selected_count(total)
        remaining = tuple(ctx.remaining_clients())
        ctx.progress("threshold", 0, count, f"{len(remaining)} remaining clients")
        with ctx.backend.step("TD"):
            deltas = determine_thresholds(ctx.backend, ctx.history, remaining)
        ctx.progress("round_selection", 0, count, f"T={total}, T'={count}, random")
        return StarfishState(
            clients=remaining,
            ranked=random_rounds(total, count, selection_seed(ctx.params)),
            method=NAME,
            deltas=deltas,
            model=ctx.history.model(0).to(torch.float64).clone(),
            log={
                "request": {"targets": list(ctx.targets), "params": params.as_dict},
                "rounds": [],
                "flags": [],
                "corrections": [],
                "curvature": [],
                "asked": {},
                "inverses": 0,
            },
        )
