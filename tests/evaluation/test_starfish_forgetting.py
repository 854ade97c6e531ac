"""Starfish forgets a backdoor at retraining's utility on a small real federation.

Eight clients on sklearn digits (the 2,410-parameter MLP), twenty FedAvg rounds,
client-00 backdoored with two triggered copies of its data. With the setting `make demo`
used at T = 15 (σ 1, β 0.4, one recovery round) and with the paper's σ 0.6 plus recovery rounds, Starfish must cut the
backdoor's success rate (BA-ASR) from the trained model's level to retraining's, keep the
test error (TER) within 2 points of retraining, and spare each remaining client at least
70 % of the rounds retraining would ask of it (ARP). docs/QUALITY.md measures the same on MNIST.
"""

from __future__ import annotations

import statistics

import pytest

from evaluation.experiment import Experiment
from evaluation.simulator import SimulationConfig

from helpers.eval_federations import backdoored_experiment, unlearn

FEDERATION = SimulationConfig(dataset="digits", num_clients=8, rounds=20, lr=0.5, local_epochs=1, batch_size=32, seed=0)
SETTINGS = {
    "demo": {"sigma": 1.0, "beta": 0.4, "recovery_rounds": 1},
    "recovery": {"sigma": 0.6, "beta": 0.4, "recovery_rounds": 3},
}
DRAWS = 5  #: runs per setting, each with its own anchored-noise draw


@pytest.fixture(scope="module")
def trained() -> tuple[Experiment, dict[str, dict[str, float]]]:
    """The federation trained once; `experiment` and `levels` (conftest) read it."""
    return backdoored_experiment(FEDERATION)


@pytest.mark.parametrize("setting", sorted(SETTINGS))
def test_starfish_forgets_the_backdoor_at_retrain_utility(experiment, levels, setting: str) -> None:
    """The anchored reveal's noise is a fresh secret draw per run (docs/PRIVACY.md), so the
    result is a distribution: its median over DRAWS runs must meet the bounds (on this
    federation about 1 run in 12 lands 7.5 points of TER above retraining)."""
    runs = [unlearn(experiment, "starfish", SETTINGS[setting]) for _ in range(DRAWS)]
    ba_asr = statistics.median(r["metrics"]["ba_asr"] for r in runs)
    ter = statistics.median(r["metrics"]["ter"] for r in runs)
    assert ba_asr <= levels["retrain"]["ba_asr"] + 0.05 < levels["before"]["ba_asr"] - 0.8
    assert ter <= levels["retrain"]["ter"] + 0.02
    assert min(r["arp_percent"] for r in runs) >= 70.0


def test_recovery_rounds_are_what_closes_the_gap_at_sigma_0_6(experiment, levels) -> None:
    without = [unlearn(experiment, "starfish", {"sigma": 0.6, "beta": 0.4, "recovery_rounds": 0}) for _ in range(DRAWS)]
    with_recovery = [unlearn(experiment, "starfish", SETTINGS["recovery"]) for _ in range(DRAWS)]
    median_ter = [statistics.median(r["metrics"]["ter"] for r in runs) for runs in (with_recovery, without)]
    assert median_ter[0] < median_ter[1]
    arp = {r["arp_percent"] + 3 * 100 / FEDERATION.rounds for r in with_recovery} | {r["arp_percent"] for r in without}
    assert max(arp) == pytest.approx(min(arp))  # three recovery rounds cost 3 of T rounds, whatever the draw
