"""Random round selection: Starfish with its round selection replaced by a random draw.

What the paper does (Starfish §VI-A, baselines): "given a selection rate σ, distinct from
the cosine similarity-based round selection, the servers randomly choose T′ rounds, upon
which they initiate the unlearning process." It isolates the value of SecRS (Algorithm 1):
everything else — threshold determination, warm-up, SecUE, SecTC every T_c rounds and
correction (Algorithm 4) — is Starfish's.

What we implement. `RandomSelectionStrategy` is `StarfishStrategy` given another
`RoundSelector`: T′ = ⌈σT⌉ distinct rounds are drawn uniformly with a seeded generator
(`seed` parameter; the draw is public, so both parties draw the same rounds from the
same seed and nothing about the target is computed or revealed for the selection).
All other parameters are Starfish's (`unlearning.starfish.params`), and so are the
backends it runs on (plaintext or 2PC) and its report ("selection.method" = "random").
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import cast

from unlearning.starfish.driver import StarfishStrategy
from unlearning.starfish.params import StarfishParams
from unlearning.starfish.secrs import RoundSelector, Selection
from unlearning.strategy import UnlearnContext, UnlearningError

NAME = "random"


@dataclass(frozen=True)
class RandomSelectionParams(StarfishParams):
    """Starfish's parameters and the seed of the public draw."""

    seed: int = 0


def random_rounds(total: int, count: int, seed: int) -> tuple[int, ...]:
    """`count` distinct rounds of 1..`total`, uniformly at random, reproducible from `seed`."""
    if not 1 <= count <= total:
        raise UnlearningError(f"cannot select {count} of {total} rounds")
    return tuple(random.Random(seed).sample(range(1, total + 1), count))


class RandomRounds(RoundSelector):
    """The public seeded draw in place of SecRS (nothing about the targets is computed)."""

    label = "random"

    def select(self, ctx: UnlearnContext, params: StarfishParams, count: int) -> Selection:
        seed = cast(RandomSelectionParams, params).seed
        return Selection(rounds=tuple(sorted(random_rounds(ctx.history.num_rounds, count, seed))), method=NAME)


class RandomSelectionStrategy(StarfishStrategy):
    """Starfish (Algorithm 4) over ⌈σT⌉ uniformly drawn rounds."""

    name = NAME
    params_type = RandomSelectionParams

    def __init__(self) -> None:
        super().__init__(selector=RandomRounds())
