"""Forgetting (BA-ASR drop) and utility (TER against retraining) of the methods that run
under 2PC, on a small synthetic federation with a backdoored client (`backdoor_fl`)."""

from __future__ import annotations

import pytest

from mpc.plain_backend import PlainBackend
from unlearning import registry
from unlearning.strategy import UnlearnContext

from helpers.backdoor_fl import TARGET, BackdoorFL
from helpers.synthetic_fl import LogRegOracle, LogRegProbe

ROUNDS = 20
LR = 0.5


def unlearned(fl: BackdoorFL, name: str, params: dict | None = None):
    backend = PlainBackend()
    history = fl.problem.history(backend, rounds=ROUNDS, lr=LR)
    ctx = UnlearnContext(
        backend=backend,
        history=history,
        oracle=LogRegOracle(fl.problem),
        targets=(TARGET,),
        params=params or {},
        probe=LogRegProbe(fl.problem),
    )
    return history.model(ROUNDS), registry.create(name).run(ctx)


@pytest.mark.parametrize("seed", [0, 1])
def test_fedrecover_forgets_the_backdoor_and_keeps_utility(seed: int) -> None:
    fl = BackdoorFL.make(seed=seed)
    original, result = unlearned(fl, "fedrecover")
    _, retrain = unlearned(fl, "retrain")
    assert fl.ba_asr(original) >= 0.7  # the backdoor was learnt
    assert fl.ba_asr(result.model) <= fl.ba_asr(retrain.model) + 0.02
    assert fl.ba_asr(original) - fl.ba_asr(result.model) >= 0.6
    assert fl.ter(result.model) <= fl.ter(retrain.model) + 0.01
    assert result.report["arp"] >= 30.0  # and it saved client rounds


@pytest.mark.parametrize("seed", [0, 1])
def test_crab_storing_every_client_forgets_the_backdoor_and_keeps_utility(seed: int) -> None:
    fl = BackdoorFL.make(seed=seed)
    original, result = unlearned(fl, "crab", {"client_ratio": 1.0})
    _, retrain = unlearned(fl, "retrain")
    assert fl.ba_asr(result.model) <= fl.ba_asr(retrain.model) + 0.02
    assert fl.ba_asr(original) - fl.ba_asr(result.model) >= 0.6
    assert fl.ter(result.model) <= fl.ter(retrain.model) + 0.01
    assert result.report["arp"] >= 15.0 and result.report["rollback_round"] < ROUNDS


def test_crab_with_the_papers_rollback_does_not_forget_a_target_it_never_stored() -> None:
    """The paper's rollback weighs only what selective storage kept: with δ = 0.7 the
    backdoored update is never among the best-aligned, so nothing is rolled back."""
    fl = BackdoorFL.make(seed=1)
    original, result = unlearned(fl, "crab", {"rollback_clients": "kept"})
    report = result.report
    assert all(TARGET not in kept for kept in report["selected_clients"].values())
    assert report["recovery_rounds"] == [] and report["arp"] == 100.0
    assert fl.ba_asr(result.model) == fl.ba_asr(original)


@pytest.mark.parametrize("seed", [0, 1])
def test_crab_forgets_a_target_it_never_stored_by_default(seed: int) -> None:
    """The default rollback weighs every participant, kept or not: the target moves it back,
    and the kept benign clients recover (docs/BASELINES.md, "Crab")."""
    fl = BackdoorFL.make(seed=seed)
    original, result = unlearned(fl, "crab")
    _, retrain = unlearned(fl, "retrain")
    assert result.report["rollback_round"] < ROUNDS and result.report["recovery_rounds"]
    assert fl.ba_asr(original) - fl.ba_asr(result.model) >= 0.6
    assert fl.ba_asr(result.model) <= fl.ba_asr(retrain.model) + 0.05  # it replays only the kept rounds
    assert fl.ter(result.model) <= fl.ter(retrain.model) + 0.03  # 12 of 20 rounds replayed from M_0
