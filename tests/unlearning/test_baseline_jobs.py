"""FedRecover and Crab as 2PC jobs: the release rule, checkpoints and resumption.

* with k = `min_cohort` = 3 FedRecover's first replayed round (exact answers at M_0, where
  Stage I published G_1) is held and revealed merged with the second; with k = 1 it is
  revealed alone with support 1 (Algorithm 1 as published: the target's gradient is G_1's
  remainder); Crab's first recovery round at the rollback model M_1 is held likewise;
* the same run on the plaintext backend and under real 2PC (dealer + two party processes
  on 127.0.0.1), as a job runs it (no probe): identical decisions (FedRecover: round kinds,
  abnormality flags, curvature bits; Crab: selected rounds and clients, rollback point),
  asks and release decisions, relative L2 model gap ≤ 1e-3 (the anchored noise on, one fixed
  draw on both backends and in a resumed run);
* a run resumed from the checkpoint of round 4 — in plaintext, and in a new 2PC session
  from each party's own stored shares — ends with the model of the uninterrupted run;
* a checkpoint of another strategy, targets or parameters is refused.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch

from mpc.backend import Backend
from mpc.cluster import TwoPartyCluster
from mpc.plain_backend import PlainBackend
from privacy.distributed import PrivateAggregator
from privacy.settings import DPSettings
from unlearning import registry
from unlearning.strategy import ResumableState, UnlearnContext, UnlearningError

from helpers.synthetic_fl import LogRegFL, LogRegOracle, fixed_noise

ROUNDS = 10
LR = 0.5
STOP_AFTER = 4  #: the checkpoint a resumed run starts from
TARGETS = ("c0",)
#: strategy → its job parameters (k = 3, as a party sets it) and the decisions both backends must share
CASES: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
    "fedrecover": (
        {"warmup_rounds": 3, "correction_interval": 4, "final_tuning": 1, "tolerance_rate": 0.3, "min_cohort": 3},
        ("round_kinds", "abnormal", "curvature", "client_rounds", "release"),
    ),
    "crab": (
        {"min_cohort": 3},
        ("round_score", "windows", "selected_rounds", "selected_clients", "rollback_round", "recovery_rounds")
        + ("client_rounds", "release"),
    ),
}
PARAMS = CASES["fedrecover"][0]


def run_case(
    backend: Backend,
    params: dict[str, Any],
    resume_from: ResumableState | None = None,
    saved: list[ResumableState] | None = None,
    targets: tuple[str, ...] = TARGETS,
    name: str = "fedrecover",
) -> dict[str, Any]:
    """One run of strategy `name` on `backend`, without a probe (as a job runs); the synthetic
    data are public to the test only."""
    problem = LogRegFL.make(seed=3)
    history = problem.history(backend, rounds=ROUNDS, lr=LR)
    ctx = UnlearnContext(backend=backend, history=history, oracle=LogRegOracle(problem), targets=targets, params=params)
    ctx.resume_from = resume_from
    ctx.on_checkpoint = None if saved is None else saved.append
    result = registry.strategy_class(name)(noise=fixed_noise).run(ctx)  # one draw on both backends
    report = result.report
    return {
        "model": result.model,
        "decisions": {key: report[key] for key in CASES[name][1]},
        "asks": [(e["t"], e["reason"], e["asked"]) for e in report["corrections"]["events"]],
        "resumed_at": report["resumed_at"],
        "costs": report["costs"],
    }


def checkpoint_parts(backend: Backend, state: ResumableState) -> dict[str, Any]:
    """A checkpoint as the service stores it: public JSON text, public tensors, this party's shares."""
    return {
        "public": json.dumps(state.public_json()),
        "tensors": state.public_tensors(),
        "secrets": {name: backend.export_shares(x) for name, x in state.secrets().items()},
    }


def restored(backend: Backend, part: dict[str, Any], name: str = "fedrecover") -> ResumableState:
    secrets = {key: backend.load_shares(share, bits) for key, (share, bits) in part["secrets"].items()}
    return registry.strategy_class(name).restore_state(json.loads(part["public"]), part["tensors"], secrets)


def party_case(backend: Backend, rank: int, name: str) -> dict[str, Any]:
    return run_case(backend, CASES[name][0], name=name)


def party_checkpoint(backend: Backend, rank: int, name: str) -> dict[str, Any]:
    """The whole run, and this party's checkpoint after round STOP_AFTER."""
    saved: list[ResumableState] = []
    out = run_case(backend, CASES[name][0], saved=saved, name=name)
    out["checkpoint"] = checkpoint_parts(backend, next(s for s in saved if s.round == STOP_AFTER))
    return out


def party_resume(backend: Backend, rank: int, name: str, checkpoints: tuple[dict, dict]) -> dict:
    """Load this party's checkpoint (its own shares) and finish the run."""
    return run_case(backend, CASES[name][0], resume_from=restored(backend, checkpoints[rank], name), name=name)


def gap(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm())


@pytest.mark.parametrize("name", sorted(CASES))
def test_runs_as_a_job(name):
    assert registry.strategy_class(name).runs_as_job() and name in registry.job_names()


def test_crabs_first_recovery_round_at_a_stage1_model_is_held():
    """Rolled back to M_1, the first recovery round's answers lie where Stage I published G_2."""
    report = registry.create("crab").run(_crab_context()).report
    assert report["rollback_round"] == 1 and report["recovery_rounds"][0] == 2
    assert report["release"]["merged"] == [[1, 2]]


def _crab_context() -> UnlearnContext:
    backend = PlainBackend()
    problem = LogRegFL.make(seed=3)
    history = problem.history(backend, rounds=ROUNDS, lr=LR)
    return UnlearnContext(backend, history, LogRegOracle(problem), TARGETS, params=CASES["crab"][0])


@pytest.mark.parametrize("k,first", [(1, "revealed"), (3, "held")])
def test_the_first_round_at_m0_is_held_below_the_minimum_cohort(k, first):
    out = run_case(PlainBackend(), {**PARAMS, "min_cohort": k})
    release = out["decisions"]["release"]
    event = release["events"][0]
    assert (event["t"], event["action"]) == (1, first)
    if k == 1:  # Algorithm 1 as published: G_1 minus this update is the target's gradient alone
        assert event["support"] == 1 and release["merged"] == []
    else:
        assert release["merged"] == [[1, 2]] and release["events"][1]["support"] >= k
    assert release["revealed_updates"] == ROUNDS - (k > 1)


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_plaintext_run_resumed_from_a_checkpoint_ends_with_the_same_model(name):
    backend = PlainBackend()
    saved: list[ResumableState] = []
    params = CASES[name][0]
    whole = run_case(backend, params, saved=saved, name=name)
    assert [s.round for s in saved] == list(range(1, len(saved) + 1)) and len(saved) > STOP_AFTER
    part = checkpoint_parts(backend, next(s for s in saved if s.round == STOP_AFTER))
    resumed = run_case(backend, params, resume_from=restored(backend, part, name), name=name)
    assert resumed["resumed_at"] == [STOP_AFTER]
    assert resumed["decisions"] == whole["decisions"] and resumed["asks"] == whole["asks"]
    torch.testing.assert_close(resumed["model"], whole["model"])


@pytest.mark.parametrize(
    "change,message",
    [
        ({"params": {**PARAMS, "tolerance_rate": 0.2}}, "other targets or parameters"),
        ({"targets": ("c1",)}, "different set of remaining clients"),
    ],
)
def test_a_checkpoint_of_another_request_is_refused(change, message):
    backend = PlainBackend()
    saved: list[ResumableState] = []
    run_case(backend, PARAMS, saved=saved)
    state = restored(backend, checkpoint_parts(backend, saved[STOP_AFTER - 1]))
    with pytest.raises(UnlearningError, match=message):
        run_case(backend, change.get("params", PARAMS), resume_from=state, targets=change.get("targets", TARGETS))


@pytest.mark.parametrize("name,message", [("fedrecover", "not a FedRecover state"), ("crab", "not a Crab state")])
def test_a_starfish_checkpoint_is_not_a_baseline_state(name, message):
    with pytest.raises(UnlearningError, match=message):
        registry.strategy_class(name).restore_state({"version": 2, "clients": []}, {}, {})


@pytest.mark.parametrize("name", sorted(CASES))
def test_with_dp_every_revealed_update_is_one_noised_release_without_the_target(name):
    backend = PlainBackend()
    problem = LogRegFL.make(seed=3)
    privacy = PrivateAggregator(DPSettings(clip=0.3, noise_multiplier=1.0, delta=1e-5))
    ctx = UnlearnContext(backend, problem.history(backend, rounds=ROUNDS, lr=LR), LogRegOracle(problem), TARGETS)
    ctx.params, ctx.privacy = CASES[name][0], privacy
    result = registry.create(name).run(ctx)
    revealed = [e for e in result.report["release"]["events"] if e["action"] == "revealed"]
    labels = [f"{name} steps {','.join(str(t) for t in e['steps'])}" for e in revealed]
    assert revealed and [r.label for r in privacy.releases] == labels
    assert all("c0" not in r.members and r.noise_multiplier == 1.0 for r in privacy.releases)
    assert gap(result.model, run_case(backend, CASES[name][0], name=name)["model"]) > 1e-3  # the noise moved it


@pytest.fixture(scope="module")
def cluster():
    with TwoPartyCluster(timeout=120) as running:
        yield running


@pytest.mark.timeout(180)
@pytest.mark.parametrize("name", sorted(CASES))
def test_plain_and_two_party_runs_agree(cluster: TwoPartyCluster, name: str) -> None:
    plain = run_case(PlainBackend(), CASES[name][0], name=name)
    assert plain["decisions"]["release"]["merged"]  # a held update was merged: both release paths exercised
    secure0, secure1 = cluster.run(party_case, name)
    for secure in (secure0, secure1):
        assert secure["decisions"] == plain["decisions"] and secure["asks"] == plain["asks"]
        assert gap(secure["model"], plain["model"]) <= 1e-3
    assert torch.equal(secure0["model"], secure1["model"])
    assert sum(step["online_bytes"] for step in secure0["costs"].values()) > 0


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_run_resumed_in_a_new_session_gives_the_same_result(cluster: TwoPartyCluster, name: str) -> None:
    plain = run_case(PlainBackend(), CASES[name][0], name=name)
    whole0, whole1 = cluster.run(party_checkpoint, name)
    checkpoints = (whole0["checkpoint"], whole1["checkpoint"])
    with TwoPartyCluster(timeout=120) as fresh:  # new processes, a new session and dealer keys
        resumed0, resumed1 = fresh.run(party_resume, name, checkpoints)
    assert torch.equal(resumed0["model"], resumed1["model"])
    assert resumed0["resumed_at"] == [STOP_AFTER]
    assert resumed0["decisions"] == plain["decisions"] == whole0["decisions"]
    for reference in (plain["model"], whole0["model"]):
        assert gap(resumed0["model"], reference) <= 1e-3
