"""The Stage II release rule (unlearning/starfish/release.py) and its place in a run."""

from __future__ import annotations

import json

import pytest
import torch

from unlearning.history import InMemoryHistory, RoundInfo
from unlearning.starfish import StarfishState, StarfishStrategy, release
from unlearning.starfish.release import PendingRelease, classify, release_support, revealable
from unlearning.strategy import UnlearningError

from helpers.synthetic_fl import fixed_noise, make_logreg_setup

N_SAMPLES = {"a": 10, "b": 20, "c": 30, "d": 40, "e": 50}


def public_history(members: list[tuple[str, ...]]) -> InMemoryHistory:
    """Public facts only (models and cohorts): the rule never reads a secret."""
    models = [torch.full((3,), float(i)) for i in range(len(members) + 1)]
    infos = [
        RoundInfo(index=i, clients=m, n_samples={c: N_SAMPLES[c] for c in m}, lr=0.1)
        for i, m in enumerate(members, start=1)
    ]
    return InMemoryHistory(models=models, infos=infos)


def fedavg(clients: tuple[str, ...], eta: float = 0.1) -> dict[str, float]:
    total = sum(N_SAMPLES[c] for c in clients)
    return {c: eta * N_SAMPLES[c] / total for c in clients}


def test_first_replay_support_is_the_targets_of_round_one() -> None:
    history = public_history([("a", "b", "c", "d", "e")] * 2)
    pending = PendingRelease(steps=[1])
    pending.add_exact(1, fedavg(("b", "c", "d", "e")))  # a forgotten: the rest, exact at M_0
    assert release_support(pending, history) == 1
    pending = PendingRelease(steps=[1])
    pending.add_exact(1, fedavg(("c", "d", "e")))  # a and b forgotten
    assert release_support(pending, history) == 2
    assert revealable(pending, history, 2) == (True, 2) and revealable(pending, history, 3) == (False, 2)


def test_opaque_clients_cannot_be_cancelled() -> None:
    history = public_history([("a", "b", "c", "d", "e")] * 2)
    pending = PendingRelease(steps=[1, 2], opaque={"c", "d"})
    pending.add_exact(1, fedavg(("b", "c", "d", "e")))
    assert release_support(pending, history) == 3  # a (uncancelled) with the opaque c, d


def test_unequal_ratios_break_the_cancellation() -> None:
    history = public_history([("a", "b", "c", "d", "e")] * 2)
    pending = PendingRelease(steps=[1, 2])
    pending.add_exact(1, fedavg(("b", "c", "d", "e")))
    pending.add_exact(1, fedavg(("d", "e")))  # d, e twice: two ratio classes {b, c} and {d, e}
    assert release_support(pending, history) == 3  # cancel {d, e}: a, b, c remain


def test_beyond_the_enumeration_limit_the_support_is_a_lower_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    history = public_history([("a", "b", "c", "d", "e")] * 2)
    pending = PendingRelease(steps=[1, 2], opaque={"c", "d"})
    pending.add_exact(1, fedavg(("b", "c", "d", "e")))
    exact = release_support(pending, history)
    monkeypatch.setattr(release, "EXACT_LIMIT", 0)
    assert 0 < release_support(pending, history) <= exact


def test_a_cohort_without_targets_repeats_stage1_and_keeps_its_size() -> None:
    history = public_history([("b", "c", "d"), ("a", "b", "c", "d")])
    pending = PendingRelease(steps=[1])
    pending.add_exact(1, fedavg(("b", "c", "d")))
    assert release_support(pending, history) == 3  # R ∝ G_1: cancelling leaves nothing new


def test_classify_splits_exact_stored_and_opaque() -> None:
    weights = {"a": 0.5, "b": 0.25, "c": 0.25}
    exact, stored, opaque = classify(["a", "b", "c"], weights, 2.0, exact_here={"a"}, stored_at_origin={"a", "b"})
    assert exact == {"a": 1.0} and stored == {"b": 0.5} and opaque == {"c"}


def test_pending_release_round_trips_through_json() -> None:
    pending = PendingRelease(steps=[2, 3], blocks={1: {"a": 0.1 / 3}, 4: {"b": 2.5}}, opaque={"c"})
    again = PendingRelease.from_json(json.loads(json.dumps(pending.to_json())))
    assert again == pending


@pytest.mark.parametrize("value,match", [(1, "min_cohort"), (0, "min_cohort"), (2.5, "min_cohort")])
def test_min_cohort_below_two_is_refused(value: object, match: str) -> None:
    setup = make_logreg_setup(rounds=6)
    with pytest.raises(UnlearningError, match=match):
        StarfishStrategy().run(setup.context(params={"min_cohort": value}))
    assert setup.oracle.requests == []


def test_full_batch_run_holds_the_first_replay_and_reports_it() -> None:
    setup = make_logreg_setup(rounds=8)
    report = StarfishStrategy().run(setup.context(params={"sigma": 1.0, "full_batch_gradients": True})).report
    release = report["release"]
    assert release["min_cohort"] == 3
    assert release["events"][0] == {
        "t": 1,
        "action": "held",
        "steps": [1],
        "support": 1,
        "kept_estimates": [],
        "noised_for": [],
    }
    # every later step is a check whose corrections would repeat the exact sum at M_0: once
    # clients have pairs, their estimates are published instead and the merged update is revealed
    assert any(e["kept_estimates"] for e in release["events"])
    assert release["merged"] and release["merged"][0][0] == 1
    values = report["revealed"]["aggregate_gradients"]["values"]
    assert values and all(v["support"] >= 3 for v in values)
    assert sum(len(v["steps"]) for v in values) + len(release["dropped_steps"]) == 8


def test_resume_with_a_held_update_gives_the_same_run() -> None:
    params = {"sigma": 1.0}
    states: list[StarfishState] = []
    ctx = make_logreg_setup(rounds=8).context(params=params)
    ctx.on_checkpoint = states.append
    full = StarfishStrategy(noise=fixed_noise).run(ctx)
    held = next(s for s in states if not s.pending.empty)
    assert held.held is not None and "held" in held.secrets()
    stored = StarfishState.from_parts(json.loads(json.dumps(held.public_json())), held.public_tensors(), held.secrets())
    ctx = make_logreg_setup(rounds=8).context(params=params)
    ctx.resume_from = stored
    resumed = StarfishStrategy(noise=fixed_noise).run(ctx)
    assert torch.equal(resumed.model, full.model)
    assert resumed.report["release"] == full.report["release"]


def test_version1_checkpoints_are_read_as_a_sorted_set() -> None:
    """A checkpoint written before the release rule (rank order, no held update) still resumes."""
    states: list[StarfishState] = []
    ctx = make_logreg_setup(rounds=8).context(params={"sigma": 0.5})
    ctx.on_checkpoint = states.append
    StarfishStrategy().run(ctx)
    state = next(s for s in states if s.pending.empty)
    public = json.loads(json.dumps(state.public_json()))
    public["version"] = 1
    public["ranked"] = list(reversed(public.pop("selected")))
    del public["pending"]
    secrets = {k: v for k, v in state.secrets().items() if k != "held"}
    old = StarfishState.from_parts(public, state.public_tensors(), secrets)
    assert old.selected == state.selected and old.pending.empty and old.held is None


def test_answers_in_another_rounds_data_order_release_the_first_replay() -> None:
    """By default an exact answer at M_0 with round 2's data order is not the vector Stage I
    aggregated in round 1 (that used round 1's order): it is opaque, so the held first replay
    is revealed merged with step 2 instead of waiting for estimates."""
    setup = make_logreg_setup(rounds=8)
    report = StarfishStrategy().run(setup.context(params={"sigma": 1.0})).report
    events = report["release"]["events"]
    assert events[0] == {"t": 1, "action": "held", "steps": [1], "support": 1, "kept_estimates": [], "noised_for": []}
    assert events[1]["action"] == "revealed" and events[1]["steps"] == [1, 2] and events[1]["support"] >= 3
    assert report["release"]["dropped_steps"] == []


def test_a_run_that_can_reveal_nothing_returns_m0_and_says_so() -> None:
    """min_cohort above the remaining clients: every step is excluded, the public model never
    moves, and the report says no update was revealed (the job's notice reads this)."""
    setup = make_logreg_setup(rounds=6, n_clients=5)
    result = StarfishStrategy().run(setup.context(params={"sigma": 1.0, "min_cohort": 5, "recovery_rounds": 0}))
    release = result.report["release"]
    assert release["revealed_updates"] == 0
    assert release["excluded_steps"] == list(range(1, 7))
    assert torch.equal(result.model, setup.history.model(0))
    assert result.report["revealed"]["aggregate_gradients"]["count"] == 0
