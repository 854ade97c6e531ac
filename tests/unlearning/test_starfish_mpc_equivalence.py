"""The same Starfish run on the plaintext backend and under real 2PC (dealer + two party
processes on 127.0.0.1, CrypTen backend): identical selected rounds, correction flags and
curvature decisions, the same release-rule decisions (held updates summed in shares), and a
relative L2 model gap ≤ 1e-3."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from mpc.backend import Backend
from mpc.cluster import TwoPartyCluster
from mpc.plain_backend import PlainBackend
from unlearning.starfish import StarfishStrategy
from unlearning.strategy import UnlearnContext

from synthetic_fl import LogRegFL, LogRegOracle

ROUNDS = 10
LR = 0.5
CASES = {
    "method1-secmi": (("c0",), {"beta": 0.2, "method": "method1", "inverse": "secmi"}),
    "alt-newton": (("c0",), {"beta": 0.2, "method": "alt", "inverse": "newton"}),
    "two-targets-method2": (("c0", "c1"), {"beta": 0.2, "method": "method2", "check_sample": 2}),
    "recovery-rounds": (("c0",), {"sigma": 0.6, "beta": 0.2, "recovery_rounds": 2}),
}


def run_case(backend: Backend, targets: tuple[str, ...], params: dict[str, Any]) -> dict[str, Any]:
    """One Starfish run on `backend`; the synthetic data are public to the test only."""
    problem = LogRegFL.make(seed=3)
    history = problem.history(backend, rounds=ROUNDS, lr=LR)
    ctx = UnlearnContext(backend=backend, history=history, oracle=LogRegOracle(problem), targets=targets, params=params)
    result = StarfishStrategy().run(ctx)
    report = result.report
    return {
        "model": result.model,
        "selection": report["selection"],
        "flags": report["flags"],
        "curvature": report["curvature"],
        "release": report["release"],
        "corrections": [(e["t"], e["reason"], e["asked"]) for e in report["corrections"]["events"]],
        "costs": report["costs"],
    }


def party_case(backend: Backend, rank: int, targets: tuple[str, ...], params: dict[str, Any]) -> dict[str, Any]:
    return run_case(backend, targets, params)


@pytest.fixture(scope="module")
def cluster():
    with TwoPartyCluster(timeout=120) as running:
        yield running


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", sorted(CASES))
def test_plain_and_two_party_runs_agree(cluster: TwoPartyCluster, case: str) -> None:
    targets, params = CASES[case]
    plain = run_case(PlainBackend(), targets, params)
    secure0, secure1 = cluster.run(party_case, targets, params)
    for secure in (secure0, secure1):
        assert secure["selection"] == plain["selection"]
        assert secure["flags"] == plain["flags"]
        assert secure["curvature"] == plain["curvature"]
        assert secure["release"] == plain["release"]  # the same steps held, merged and revealed
        assert secure["corrections"] == plain["corrections"]
        gap = float((secure["model"].double() - plain["model"].double()).norm() / plain["model"].double().norm())
        assert gap <= 1e-3, gap
    assert torch.equal(secure0["model"], secure1["model"])
    assert secure0["costs"]["UE"]["online_bytes"] > 0
