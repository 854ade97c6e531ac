"""Optional distributed DP on Stage II's revealed aggregates: clipping inside 2PC, noised
reveals, the release log and its (ε, δ) by Opacus's RDP accountant.

The secure run with DP on and σ = 0 (noise multiplier 0, clipping active) must match the
plaintext run exactly as without DP: same selected rounds and flags, relative gap ≤ 1e-3."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from opacus.accountants import RDPAccountant

from mpc.backend import Backend
from mpc.cluster import TwoPartyCluster
from mpc.plain_backend import PlainBackend
from privacy.accountant import client_epsilon, epsilon_per_client, privacy_report
from privacy.distributed import PrivateAggregator
from privacy.release_log import Release
from privacy.settings import DPSettings
from unlearning.starfish import StarfishStrategy
from unlearning.strategy import UnlearnContext

from helpers.synthetic_fl import LogRegFL, LogRegOracle, fixed_noise

ROUNDS = 10
LR = 0.5
PARAMS = {"sigma": 0.6, "beta": 0.2, "recovery_rounds": 0, "method": "method1", "inverse": "secmi"}
CLIP = 0.3  # the synthetic clients' gradient norms are 0.21–0.54: some rows are clipped, some not


def run_case(backend: Backend, settings: DPSettings | None) -> dict[str, Any]:
    problem = LogRegFL.make(seed=3)
    history = problem.history(backend, rounds=ROUNDS, lr=LR)
    privacy = PrivateAggregator(settings) if settings is not None else None
    ctx = UnlearnContext(
        backend=backend,
        history=history,
        oracle=LogRegOracle(problem),
        targets=("c0",),
        params=PARAMS,
        privacy=privacy,
    )
    result = StarfishStrategy(noise=fixed_noise).run(ctx)
    return {
        "model": result.model,
        "selection": result.report["selection"],
        "flags": result.report["flags"],
        "decisions": result.report["release"]["events"],
        "releases": [] if privacy is None else [r.as_dict() | {"members": r.members} for r in privacy.releases],
    }


def party_case(backend: Backend, rank: int, settings: DPSettings) -> dict[str, Any]:
    return run_case(backend, settings)


@pytest.fixture(scope="module")
def cluster():
    with TwoPartyCluster(timeout=120) as running:
        yield running


def gap(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm())


@pytest.mark.timeout(400)  # a 2PC Starfish run: 30–140 s on the shared two-core machine
def test_secure_dp_run_with_zero_noise_matches_plaintext(cluster: TwoPartyCluster) -> None:
    settings = DPSettings(clip=CLIP, noise_multiplier=0.0, delta=1e-5)
    plain = run_case(PlainBackend(), settings)
    unclipped = run_case(PlainBackend(), None)
    assert gap(plain["model"], unclipped["model"]) > 1e-3, "clipping must be active in this case"
    secure0, secure1 = cluster.run(party_case, settings)
    for secure in (secure0, secure1):
        assert secure["selection"] == plain["selection"]
        assert secure["flags"] == plain["flags"]
        assert secure["releases"] == plain["releases"]
        assert gap(secure["model"], plain["model"]) <= 1e-3
    assert torch.equal(secure0["model"], secure1["model"])


def test_noise_changes_the_model_and_every_release_is_logged() -> None:
    settings = DPSettings(clip=CLIP, noise_multiplier=1.0, delta=1e-5)
    quiet = run_case(PlainBackend(), DPSettings(clip=CLIP, noise_multiplier=0.0, delta=1e-5))
    noisy = run_case(PlainBackend(), settings)
    assert gap(noisy["model"], quiet["model"]) > 1e-3
    releases = noisy["releases"]
    revealed = [d for d in noisy["decisions"] if d["action"] == "revealed"]
    assert revealed and len(releases) == len(revealed)  # one noised release per reveal of the rule
    merged = [t for d in revealed for t in d["steps"]]
    assert [f"stage2 steps {','.join(str(t) for t in d['steps'])}" for d in revealed] == [r["label"] for r in releases]
    assert len(merged) == len(set(merged))
    for release in releases:
        assert "c0" not in release["members"]  # the target is in no Stage II aggregate
        assert release["cohort"] == len(release["members"]) and release["noise_multiplier"] == 1.0


def test_accountant_is_opacus_rdp_per_client() -> None:
    releases = [
        Release("r1", 1.0, ("a", "b")),
        Release("r2", 1.0, ("a",)),
        Release("r3", 2.0, ("a", "b")),
    ]
    eps = epsilon_per_client(releases, 1e-5)
    reference = RDPAccountant()
    reference.history = [(1.0, 1.0, 2), (2.0, 1.0, 1)]
    assert eps["a"] == pytest.approx(reference.get_epsilon(1e-5))
    assert eps["b"] < eps["a"]  # b was in fewer releases
    report = privacy_report(releases, 1e-5)
    assert report["epsilon"] == pytest.approx(eps["a"]) and set(report["per_client"]) == {"a", "b"}
    assert [r["cohort"] for r in report["releases"]] == [2, 1, 2]
    assert client_epsilon([0.0, 1.0], 1e-5) == math.inf
    assert privacy_report([Release("x", 0.0, ("a",))], 1e-5)["epsilon"] == "inf"
    # more noise, less ε
    assert client_epsilon([4.0] * 10, 1e-5) < client_epsilon([1.0] * 10, 1e-5)


def test_fedadp_schedule_moves_the_multiplier_within_its_bounds() -> None:
    settings = DPSettings(clip=CLIP, noise_multiplier=2.0, delta=1e-5, schedule="fedadp")
    out = run_case(PlainBackend(), settings)
    zs = [r["noise_multiplier"] for r in out["releases"]]
    assert zs[0] == 2.0
    assert all(1.0 - 1e-12 <= z <= 2.0 for z in zs)  # ε_t ∈ [ε_0, 2ε_0] ⇔ z_t ∈ [z_0/2, z_0]
    assert any(z < 2.0 for z in zs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"clip": 0.0}, "privacy.clip"),
        ({"clip": math.inf}, "privacy.clip"),
        ({"noise_multiplier": -1.0}, "privacy.noise_multiplier"),
        ({"delta": 0.0}, "privacy.delta"),
        ({"delta": 1.0}, "privacy.delta"),
        ({"schedule": "adaptive"}, "privacy.schedule"),
        ({"schedule": "fedadp", "noise_multiplier": 0.0}, "fedadp"),
    ],
)
def test_settings_refuse_bad_values(kwargs: dict[str, Any], message: str) -> None:
    base = {"clip": 1.0, "noise_multiplier": 1.0, "delta": 1e-5}
    with pytest.raises(ValueError, match=message):
        DPSettings(**(base | kwargs))


def test_restore_continues_the_log_and_the_schedule() -> None:
    aggregator = PrivateAggregator(DPSettings(clip=CLIP, noise_multiplier=2.0, delta=1e-5, schedule="fedadp"))
    saved = [Release("stage2 round 3", 2.0, ("c1", "c2")), Release("stage2 round 5", 1.5, ("c1",))]
    aggregator.restore(saved)
    assert aggregator.releases == saved and aggregator.noise_multiplier == 1.5
    aggregator.restore([])
    assert aggregator.releases == [] and aggregator.noise_multiplier == 2.0
