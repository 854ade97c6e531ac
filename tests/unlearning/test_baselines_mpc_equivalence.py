"""FedRecover and Crab on the plaintext backend and under real 2PC (dealer + two party
processes on 127.0.0.1, CrypTen backend): identical schedules, abnormality flags,
curvature decisions, selected rounds and clients, rollback points, and a relative L2
model gap ≤ 1e-3."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from mpc.backend import Backend
from mpc.cluster import TwoPartyCluster
from mpc.plain_backend import PlainBackend
from unlearning import registry
from unlearning.strategy import UnlearnContext

from helpers.synthetic_fl import LogRegFL, LogRegOracle, LogRegProbe

ROUNDS = 10
LR = 0.5
#: name → (strategy, targets, params); the FedRecover cases flag some clients and not
#: others, the Crab cases keep some clients and not others and roll back part-way
CASES: dict[str, tuple[str, tuple[str, ...], dict[str, Any]]] = {
    "fedrecover-secmi": (
        "fedrecover",
        ("c0",),
        {"warmup_rounds": 3, "correction_interval": 4, "final_tuning": 1, "tolerance_rate": 0.3},
    ),
    "fedrecover-newton-two-targets": (
        "fedrecover",
        ("c0", "c1"),
        {"warmup_rounds": 3, "correction_interval": 0, "final_tuning": 0, "tolerance_rate": 0.5, "inverse": "newton"},
    ),
    "crab-two-targets": (
        "crab",
        ("c0", "c1"),
        {"loss_reduction": 0.1, "client_ratio": 0.8, "round_ratio": 0.5},
    ),
    "crab-kept-target": ("crab", ("c4",), {"loss_reduction": 0.2, "client_ratio": 0.6}),
}
#: report entries that must be identical on both backends, per strategy
DECISIONS = {
    "fedrecover": ("round_kinds", "abnormal", "curvature", "client_rounds"),
    "crab": ("selected_rounds", "selected_clients", "rollback_round", "recovery_rounds", "client_rounds"),
}


def run_case(backend: Backend, case: str) -> dict[str, Any]:
    """One run on `backend`; the synthetic data are public to the test only."""
    name, targets, params = CASES[case]
    problem = LogRegFL.make(seed=3)
    history = problem.history(backend, rounds=ROUNDS, lr=LR)
    ctx = UnlearnContext(
        backend=backend,
        history=history,
        oracle=LogRegOracle(problem),
        targets=targets,
        params=params,
        probe=LogRegProbe(problem),
    )
    result = registry.create(name).run(ctx)
    out = {key: result.report[key] for key in DECISIONS[name]}
    return {"model": result.model, "decisions": out, "costs": result.report["costs"]}


def party_case(backend: Backend, rank: int, case: str) -> dict[str, Any]:
    return run_case(backend, case)


@pytest.fixture(scope="module")
def cluster():
    with TwoPartyCluster(timeout=120) as running:
        yield running


@pytest.mark.timeout(180)
@pytest.mark.parametrize("case", sorted(CASES))
def test_plain_and_two_party_runs_agree(cluster: TwoPartyCluster, case: str) -> None:
    plain = run_case(PlainBackend(), case)
    secure0, secure1 = cluster.run(party_case, case)
    for secure in (secure0, secure1):
        assert secure["decisions"] == plain["decisions"]
        gap = float((secure["model"].double() - plain["model"].double()).norm() / plain["model"].double().norm())
        assert gap <= 1e-3, gap
    assert torch.equal(secure0["model"], secure1["model"])
    assert sum(step["online_bytes"] for step in secure0["costs"].values()) > 0
