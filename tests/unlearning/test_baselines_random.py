"""Random round selection: Starfish over ⌈σT⌉ seeded random rounds."""

from __future__ import annotations

import math

import pytest
import torch

from unlearning.baselines.random_selection import RandomSelectionStrategy, random_rounds
from unlearning.strategy import UnlearningError


@pytest.mark.parametrize("total,sigma", [(8, 0.6), (40, 0.6), (10, 0.25), (7, 1.0)])
def test_random_rounds_are_distinct_in_range_and_seeded(total, sigma):
    count = math.ceil(sigma * total)
    first = random_rounds(total, count, seed=5)
    assert len(first) == count == len(set(first))
    assert all(1 <= r <= total for r in first)
    assert random_rounds(total, count, seed=5) == first


def test_different_seeds_draw_different_rounds():
    draws = {random_rounds(40, 24, seed) for seed in range(5)}
    assert len(draws) == 5


def test_random_selection_runs_starfish_on_the_drawn_rounds(logreg_fl):
    result = RandomSelectionStrategy().run(logreg_fl.context(params={"seed": 11, "sigma": 0.5, "recovery_rounds": 0}))
    selection = result.report["selection"]
    assert selection["method"] == "random"
    assert selection["selected_rounds"] == sorted(random_rounds(8, 4, 11))
    replayed = [entry["round"] for entry in result.report["rounds"]]
    assert replayed == selection["selected_rounds"]
    assert all("c0" not in r.clients for r in logreg_fl.oracle.requests)
    assert torch.isfinite(result.model).all()


def test_same_seed_same_unlearned_model(logreg_fl):
    a = RandomSelectionStrategy().run(logreg_fl.context(params={"seed": 2})).model
    b = RandomSelectionStrategy().run(logreg_fl.context(params={"seed": 2})).model
    torch.testing.assert_close(a, b)


@pytest.mark.parametrize("params", [{"seed": "x"}, {"seed": True}, {"sigma": 0.0}, {"selection": "cosine"}])
def test_random_selection_rejects_bad_parameters(logreg_fl, params):
    with pytest.raises(UnlearningError):
        RandomSelectionStrategy().run(logreg_fl.context(params=params))


def test_random_selection_resumes_from_a_checkpoint(logreg_fl):
    states = []
    ctx = logreg_fl.context(params={"seed": 4})
    ctx.on_checkpoint = states.append
    full = RandomSelectionStrategy().run(ctx)
    resumed_ctx = logreg_fl.context(params={"seed": 4})
    resumed_ctx.resume_from = states[1]
    resumed = RandomSelectionStrategy().run(resumed_ctx)
    torch.testing.assert_close(resumed.model, full.model)
    assert resumed.report["selection"] == full.report["selection"]
