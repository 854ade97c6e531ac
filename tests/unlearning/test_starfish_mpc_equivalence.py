"""The same Starfish run on the plaintext backend and under real 2PC (dealer + two party
processes on 127.0.0.1, CrypTen backend): identical selected rounds, correction flags and
curvature decisions, the same release-rule decisions (held updates summed in shares), and a
relative L2 model gap ≤ 1e-3. A run resumed from a checkpoint in a new session (new dealer
keys, no fixed operands: every pair's ŷ is fixed again) gives the same result."""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch

from mpc.backend import Backend
from mpc.cluster import TwoPartyCluster
from mpc.plain_backend import PlainBackend
from unlearning.starfish import StarfishState, StarfishStrategy
from unlearning.strategy import UnlearnContext

from helpers.synthetic_fl import LogRegFL, LogRegOracle, fixed_noise

ROUNDS = 10
LR = 0.5
CASES = {
    "method1-secmi": (("c0",), {"beta": 0.2, "method": "method1", "inverse": "secmi"}),
    "alt-newton": (("c0",), {"beta": 0.2, "method": "alt", "inverse": "newton"}),
    "two-targets-method2": (("c0", "c1"), {"beta": 0.2, "method": "method2", "check_sample": 2}),
    "recovery-rounds": (("c0",), {"sigma": 0.6, "beta": 0.2, "recovery_rounds": 2}),
}


STOP_AFTER = 4  #: the checkpoint a resumed run starts from


def run_case(
    backend: Backend,
    targets: tuple[str, ...],
    params: dict[str, Any],
    resume_from: StarfishState | None = None,
    saved: list[StarfishState] | None = None,
) -> dict[str, Any]:
    """One Starfish run on `backend`; the synthetic data are public to the test only."""
    problem = LogRegFL.make(seed=3)
    history = problem.history(backend, rounds=ROUNDS, lr=LR)
    ctx = UnlearnContext(backend=backend, history=history, oracle=LogRegOracle(problem), targets=targets, params=params)
    ctx.resume_from = resume_from
    ctx.on_checkpoint = None if saved is None else saved.append
    result = StarfishStrategy(noise=fixed_noise).run(ctx)  # one draw on both backends
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


def party_checkpoint(backend: Backend, rank: int, targets: tuple[str, ...], params: dict[str, Any]) -> dict[str, Any]:
    """The whole run, and this party's checkpoint after round STOP_AFTER as the service stores it."""
    saved: list[StarfishState] = []
    out = run_case(backend, targets, params, saved=saved)
    state = next(s for s in saved if s.round == STOP_AFTER)
    out["pairs"] = sum(len(pairs) for pairs in state.buffers.values())
    out["checkpoint"] = {
        "public": json.dumps(state.public_json()),
        "tensors": state.public_tensors(),
        "secrets": {name: backend.export_shares(x) for name, x in state.secrets().items()},
    }
    return out


def party_resume(
    backend: Backend, rank: int, targets: tuple[str, ...], params: dict[str, Any], checkpoints: tuple[dict, dict]
) -> dict[str, Any]:
    """Load this party's checkpoint (its own shares) and finish the run."""
    part = checkpoints[rank]
    secrets = {name: backend.load_shares(share, bits) for name, (share, bits) in part["secrets"].items()}
    state = StarfishState.from_parts(json.loads(part["public"]), part["tensors"], secrets)
    return run_case(backend, targets, params, resume_from=state)


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


@pytest.mark.timeout(240)
def test_a_run_resumed_in_a_new_session_gives_the_same_result(cluster: TwoPartyCluster) -> None:
    """The checkpoint holds pairs (no fixed handles); a new session fixes them again."""
    targets, params = CASES["method1-secmi"]
    plain = run_case(PlainBackend(), targets, params)
    whole0, whole1 = cluster.run(party_checkpoint, targets, params)
    assert whole0["pairs"] > 0
    checkpoints = (whole0["checkpoint"], whole1["checkpoint"])
    with TwoPartyCluster(timeout=120) as fresh:  # new processes, a new session and dealer keys
        resumed0, resumed1 = fresh.run(party_resume, targets, params, checkpoints)
    assert torch.equal(resumed0["model"], resumed1["model"])
    for key in ("selection", "flags", "curvature", "release", "corrections"):
        assert resumed0[key] == plain[key] == whole0[key], key
    for reference in (plain["model"], whole0["model"]):
        gap = float((resumed0["model"].double() - reference.double()).norm() / reference.double().norm())
        assert gap <= 1e-3, gap
