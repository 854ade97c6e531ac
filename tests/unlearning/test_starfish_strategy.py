"""Starfish (Algorithm 4) end to end on the plaintext backend with the synthetic LogReg problem."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest
import torch

from mpc.backend import Backend, Secret
from unlearning.history import GradientOracle, GradientRequest
from unlearning.starfish import StarfishParams, StarfishState, StarfishStrategy
from unlearning.starfish.run_report import average_round_saving, theorem1_bound
from unlearning.strategy import UnlearningError

from helpers.synthetic_fl import LogRegFL, LogRegOracle, LogRegSetup, make_logreg_setup

LR = 0.5
#: the paper's schedule (§VI-A): these tests check Algorithm 4's selection, checks and ARP on it
PAPER = {"sigma": 0.6, "beta": 0.1, "recovery_rounds": 0}
ETA_U = LR / 0.6  #: η_l/σ: T′ = σT replayed rounds cover the same "distance" as T rounds


def retrain(setup: LogRegSetup, rounds: int, targets: tuple[str, ...]) -> torch.Tensor:
    return setup.problem.fedavg(rounds, LR, clients=[c for c in setup.problem.clients if c not in targets])[-1]


@pytest.mark.parametrize(
    "params",
    [
        {"method": "method1"},
        {"method": "method2"},
        {"method": "alt"},
        {"inverse": "newton"},
    ],
)
def test_unlearning_moves_model_toward_retrain(params: dict) -> None:
    setup = make_logreg_setup(rounds=20, lr=LR)
    result = StarfishStrategy().run(setup.context(params={**PAPER, "eta_u": ETA_U, **params}))
    target = retrain(setup, 20, ("c0",))
    original_gap = float((setup.history.model(20) - target).norm())
    starfish_gap = float((result.model - target).norm())
    assert torch.isfinite(result.model).all()
    assert result.model.dtype == torch.float32
    assert starfish_gap < 0.25 * original_gap
    report = result.report
    assert report["selected_count"] == 12 and len(report["selection"]["selected_rounds"]) == 12
    assert report["check_interval"] == 2  # ⌈βT⌉ = ⌈0.1·20⌉
    assert set(report["costs"]) >= {"TD", "RS", "UE", "TC", "warmup"}


def test_several_targets_in_one_request() -> None:
    setup = make_logreg_setup(rounds=12, lr=LR)
    result = StarfishStrategy().run(setup.context(targets=("c0", "c1"), params={**PAPER, "eta_u": ETA_U}))
    target = retrain(setup, 12, ("c0", "c1"))
    assert result.report["selection"]["method"].startswith("alt-")
    assert float((result.model - target).norm()) < 0.5 * float((setup.history.model(12) - target).norm())
    asked = {c for e in result.report["corrections"]["events"] for c in e["asked"]}
    assert asked and asked.isdisjoint({"c0", "c1"})


def run_with_checkpoints(setup: LogRegSetup, params: dict, resume_from: StarfishState | None = None):
    states: list[StarfishState] = []
    ctx = setup.context(params=params)
    ctx.on_checkpoint = states.append
    ctx.resume_from = resume_from
    return StarfishStrategy().run(ctx), states


def through_parts(state: StarfishState) -> StarfishState:
    """Persist-and-load as the service would: JSON text, public tensors, secrets by name."""
    public = json.loads(json.dumps(state.public_json()))
    return StarfishState.from_parts(public, state.public_tensors(), state.secrets())


@pytest.mark.parametrize("stop_after", [1, 4, 7])
def test_resume_from_checkpoint_gives_same_model(stop_after: int) -> None:
    params = {**PAPER, "eta_u": ETA_U, "beta": 0.2}
    full, states = run_with_checkpoints(make_logreg_setup(rounds=12, lr=LR), params)
    assert [s.round for s in states] == list(range(1, 9))

    class Crash(RuntimeError):
        pass

    setup = make_logreg_setup(rounds=12, lr=LR)
    saved: list[StarfishState] = []

    def crash(state: StarfishState) -> None:
        saved.append(state)
        if state.round == stop_after:
            raise Crash

    ctx = setup.context(params=params)
    ctx.on_checkpoint = crash
    with pytest.raises(Crash):
        StarfishStrategy().run(ctx)
    resumed, later = run_with_checkpoints(setup, params, resume_from=through_parts(saved[-1]))
    assert torch.equal(resumed.model, full.model)
    assert resumed.report["flags"] == full.report["flags"]
    assert resumed.report["selection"] == full.report["selection"]
    assert resumed.report["arp_percent"] == full.report["arp_percent"]
    assert resumed.report["resumed_at"] == [stop_after]
    assert [s.round for s in later] == list(range(stop_after + 1, 9))


def test_resume_without_cached_forms_rebuilds_them() -> None:
    """A checkpoint without YᵀY rows and compact forms (older layout): they are rebuilt, same
    run (YᵀY from the held rows: this run's steps are short, so they are raw with a scale)."""
    params = {**PAPER, "eta_u": ETA_U, "beta": 0.2}
    full, states = run_with_checkpoints(make_logreg_setup(rounds=12, lr=LR), params)
    state = states[4]
    assert state.forms and all(p.scale > 1.0 for pairs in state.buffers.values() for p in pairs)
    public = json.loads(json.dumps(state.public_json()))
    public.pop("forms")
    secrets = {k: v for k, v in state.secrets().items() if not k.startswith("form/") and not k.endswith("/yy")}
    old = StarfishState.from_parts(public, state.public_tensors(), secrets)
    assert not old.forms and all(p.yy is None for pairs in old.buffers.values() for p in pairs)
    resumed, _ = run_with_checkpoints(make_logreg_setup(rounds=12, lr=LR), params, resume_from=old)
    assert resumed.report["flags"] == full.report["flags"]
    torch.testing.assert_close(resumed.model, full.model, rtol=1e-6, atol=1e-7)


def test_state_lists_its_secrets_and_rejects_incomplete_parts() -> None:
    _, states = run_with_checkpoints(make_logreg_setup(rounds=8, lr=LR), {**PAPER, "eta_u": ETA_U})
    state = states[-1]
    secrets = state.secrets()
    assert "deltas" in secrets and all(isinstance(s, Secret) for s in secrets.values())
    pairs = [k for k in secrets if k.startswith("buffer/") and k.endswith("/y")]
    rounds = {r for held in state.public_json()["buffers"].values() for r in held}
    assert pairs and set(state.public_tensors()) == {"model"} | {f"pairs/s/{r}" for r in rounds}  # ŝ once a round
    assert all(k + "y" in secrets for k in pairs)  # each pair's row of YᵀY
    forms = [k for k in secrets if k.startswith("form/")]
    assert {k.split("/")[1] for k in forms} == set(state.forms)  # the cached compact forms
    assert set(state.public_json()["forms"]) == set(state.forms)
    assert json.loads(json.dumps(state.public_json()))["round"] == state.round
    partial = dict(secrets)
    partial.pop(pairs[0])
    with pytest.raises(ValueError, match="missing"):
        StarfishState.from_parts(state.public_json(), state.public_tensors(), partial)
    partial = dict(secrets)
    partial.pop(forms[0])
    with pytest.raises(ValueError, match="missing"):
        StarfishState.from_parts(state.public_json(), state.public_tensors(), partial)


@pytest.mark.parametrize("buffer_size", [1, 2, 3])
def test_degenerate_first_round_uses_the_stored_uploads_and_warmup_follows(buffer_size: int) -> None:
    setup = make_logreg_setup(rounds=12, lr=LR)
    result = StarfishStrategy().run(setup.context(params={**PAPER, "eta_u": ETA_U, "buffer_size": buffer_size}))
    report = result.report
    assert report["selection"]["selected_rounds"][0] == 1  # M̂_1 = M_0: the first step s is 0
    assert report["rounds"][0]["kind"] == "stored"  # g_1^j is exact at M_0: nobody is asked
    assert report["warmup"] == {"rounds": buffer_size, "nondegenerate": buffer_size}
    warm = [r for r in setup.oracle.requests if r.reason == "warmup"]
    assert [r.unlearning_round for r in warm] == list(range(2, buffer_size + 2))
    assert all(set(r.clients) == {"c1", "c2", "c3", "c4"} for r in warm)
    assert report["curvature"]["offered"] >= 4 * buffer_size  # no pair from the s = 0 round


@dataclass
class AdversarialOracle(GradientOracle):
    """Honest except `liar`, whose answers make y = −scale·s (curvature yᵀs < 0)."""

    problem: LogRegFL
    history: object
    liar: str
    scale: float
    requests: list[GradientRequest] = field(default_factory=list)

    def exact_gradients(self, backend: Backend, request: GradientRequest) -> Mapping[str, Secret | None]:
        self.requests.append(request)
        out = {}
        base = self.history.model(request.original_round - 1)
        for c in request.clients:
            if c == self.liar:
                g = self.problem.gradient(c, base) - self.scale * (request.model.double() - base.double())
            else:
                g = self.problem.gradient(c, request.model)
            out[c] = backend.share(g)
        return out


def test_curvature_safeguard_skips_negative_pairs_and_stays_finite() -> None:
    setup = make_logreg_setup(rounds=12, lr=LR)
    setup.oracle = AdversarialOracle(setup.problem, setup.history, liar="c2", scale=1e6)
    states: list[StarfishState] = []
    ctx = setup.context(params={**PAPER, "eta_u": ETA_U})
    ctx.on_checkpoint = states.append
    result = StarfishStrategy().run(ctx)
    assert torch.isfinite(result.model).all()
    curvature = states[-1].log.curvature
    liar = [c for c in curvature if c.client == "c2"]
    assert liar and not any(c.accepted for c in liar)
    assert all(c.accepted for c in curvature if c.client != "c2")
    assert "c2" not in states[-1].buffers
    assert result.report["revealed"]["curvature_bits"]["rejected"] == len(liar)
    assert result.report["revealed"]["curvature_bits"]["count"] == len(curvature)


def test_checks_flags_corrections_and_arp() -> None:
    setup = make_logreg_setup(rounds=12, lr=LR)
    setup.oracle.silent = frozenset({"c3"})
    result = StarfishStrategy().run(setup.context(params={**PAPER, "eta_u": ETA_U, "beta": 0.25, "alpha": 0.4}))
    report = result.report
    interval = report["check_interval"]
    assert interval == 3
    warm_end = max(e["t"] for e in report["rounds"] if e["kind"] in ("stored", "warmup"))
    checked = [f["t"] for f in report["flags"]]
    assert checked == [t for t in range(1, report["selected_count"] + 1) if t % interval == 0 and t > warm_end]
    for entry in report["flags"]:
        assert set(entry["flags"]) == {"c1", "c2", "c3", "c4"}
    corrections = [e for e in report["corrections"]["events"] if e["reason"] == "correction"]
    for event in corrections:
        flags = next(f["flags"] for f in report["flags"] if f["t"] == event["t"])
        assert event["asked"] == [c for c, f in flags.items() if f]
        assert "c3" not in event["answered"]
    assert report["corrections"]["missing"] == sum("c3" in e["asked"] for e in corrections)
    asked = {c: sum(c in e["asked"] for e in report["corrections"]["events"]) for c in ("c1", "c2", "c3", "c4")}
    assert report["asked_rounds"] == asked
    expected = sum((12 - asked[c]) / 12 for c in asked) / 4 * 100
    assert report["arp_percent"] == pytest.approx(expected)
    assert torch.isfinite(result.model).all()


def test_progress_events_cover_every_step() -> None:
    setup = make_logreg_setup(rounds=10, lr=LR)
    events = []
    ctx = setup.context(params={**PAPER, "eta_u": ETA_U, "beta": 0.2})
    ctx.on_progress = events.append
    StarfishStrategy().run(ctx)
    steps = {e.step for e in events}
    assert {"threshold", "round_selection", "warmup", "estimate", "threshold_check", "done"} <= steps
    assert all(e.total_rounds == 6 for e in events)


@pytest.mark.parametrize(
    "params,match",
    [
        ({"sigma": 0}, "sigma"),
        ({"sigma": 1.5}, "sigma"),
        ({"alpha": -0.1}, "alpha"),
        ({"beta": "0.1"}, "beta"),
        ({"sigma": float("nan")}, "sigma"),
        ({"buffer_size": 0}, "buffer_size"),
        ({"buffer_size": 2.0}, "buffer_size"),
        ({"B": True}, "buffer_size"),
        ({"switch_threshold": 0}, "switch_threshold"),
        ({"eta_u": -1.0}, "eta_u"),
        ({"method": "fast"}, "method"),
        ({"inverse": "gauss"}, "inverse"),
        ({"gamma": 1}, "gamma"),
        ({"hv_bound": 0}, "hv_bound"),
    ],
)
def test_invalid_parameters_are_rejected_before_any_work(params: dict, match: str) -> None:
    setup = make_logreg_setup(rounds=6, lr=LR)
    with pytest.raises(UnlearningError, match=match):
        StarfishStrategy().run(setup.context(params=params))
    assert setup.backend.ledger.steps == {} and setup.oracle.requests == []


def test_bad_targets_and_resume_state_are_rejected() -> None:
    setup = make_logreg_setup(rounds=6, lr=LR)
    with pytest.raises(UnlearningError, match="unknown target"):
        StarfishStrategy().run(setup.context(targets=("nobody",)))
    ctx = setup.context()
    ctx.resume_from = {"round": 3}
    with pytest.raises(UnlearningError, match="resume"):
        StarfishStrategy().run(ctx)


def test_the_defaults_replay_every_round_with_a_check_every_three_tenths_and_one_recovery_round() -> None:
    params = StarfishStrategy.parse_params({})
    assert (params.sigma, params.alpha, params.beta, params.buffer_size) == (1.0, 0.4, 0.3, 2)
    assert params.recovery_rounds == 1 and params.hv_bound == 2.0
    assert params.selected_count(20) == 20 and params.check_interval(20) == 6  # checks at 6, 12, 18


def test_parameter_derivations_follow_the_paper() -> None:
    params = StarfishStrategy.parse_params({"sigma": 0.6, "beta": 0.1, "T_delta": 16})
    assert params.selected_count(40) == 24 and params.check_interval(40) == 4
    assert params.comparison(16) == "method1" and params.comparison(17) == "method2"
    assert StarfishStrategy.parse_params({"method": "alt", "T_delta": 8}).comparison(9) == "method2"
    assert StarfishParams(sigma=0.6).unlearning_rate(0.3) == 0.3
    assert StarfishParams(eta_u=0.01).unlearning_rate(0.3) == 0.01


def test_default_unlearning_rate_is_the_stored_rate() -> None:
    report = StarfishStrategy().run(make_logreg_setup(rounds=8, lr=LR).context(params={"sigma": 0.5})).report
    assert {entry["eta_u"] for entry in report["rounds"]} == {LR}
    assert report["theorem1"]["eta_u"] == LR


def test_report_helpers() -> None:
    assert average_round_saving({"a": 4, "b": 10}, ["a", "b", "c"], 40) == pytest.approx((36 + 30 + 40) / 120 * 100)
    value = theorem1_bound(eta_u=0.01, sigma=0.5, mu=4.0, loss_gap=2.0, t_i=10)
    assert value == pytest.approx(2 * math.sqrt(0.01 * (0.25 + 1.0) * 2.0 * 10))
    with pytest.raises(ValueError, match="μ > 2"):
        theorem1_bound(eta_u=0.01, sigma=0.5, mu=1.5, loss_gap=1.0, t_i=3)


def test_sample_first_check_gives_the_same_flags_and_model() -> None:
    params = {**PAPER, "eta_u": ETA_U, "beta": 0.2}
    plain = StarfishStrategy().run(make_logreg_setup(rounds=12, lr=LR).context(params=params))
    sampled = StarfishStrategy().run(make_logreg_setup(rounds=12, lr=LR).context(params={**params, "check_sample": 2}))
    assert sampled.report["flags"] == plain.report["flags"] and plain.report["flags"]
    assert torch.equal(sampled.model, plain.model)
    assert sampled.report["revealed"]["sample_decided_bits"]["count"] == sum(
        len(f["flags"]) for f in plain.report["flags"]
    )
    assert plain.report["revealed"]["sample_decided_bits"]["count"] == 0


def test_report_costs_cover_one_call_and_accumulate_on_the_backend() -> None:
    setup = make_logreg_setup(rounds=8, lr=LR)
    first = StarfishStrategy().run(setup.context(params={**PAPER, "eta_u": ETA_U}))
    second = StarfishStrategy().run(setup.context(params={**PAPER, "eta_u": ETA_U}))
    calls = {k: v["calls"] for k, v in first.report["costs"].items()}
    assert calls == {k: v["calls"] for k, v in second.report["costs"].items()}
    assert {k: v.calls for k, v in setup.backend.ledger.steps.items()} == {k: 2 * c for k, c in calls.items()}


def test_resume_refuses_a_different_request() -> None:
    _, states = run_with_checkpoints(make_logreg_setup(rounds=8, lr=LR), {**PAPER, "eta_u": ETA_U})
    setup = make_logreg_setup(rounds=8, lr=LR)
    ctx = setup.context(params={**PAPER, "eta_u": ETA_U, "beta": 0.5})
    ctx.resume_from = through_parts(states[2])
    with pytest.raises(UnlearningError, match="same request"):
        StarfishStrategy().run(ctx)


def test_malformed_answer_is_a_clear_error_after_the_last_checkpoint() -> None:
    setup = make_logreg_setup(rounds=8, lr=LR)

    class ShortAnswers(LogRegOracle):
        def exact_gradients(self, backend, request):
            answers = dict(super().exact_gradients(backend, request))
            if request.unlearning_round == 2:
                answers["c2"] = backend.share(torch.zeros(3, dtype=torch.float64))
            return answers

    setup.oracle = ShortAnswers(setup.problem)
    states: list[StarfishState] = []
    ctx = setup.context(params={**PAPER, "eta_u": ETA_U})
    ctx.on_checkpoint = states.append
    with pytest.raises(UnlearningError, match="'c2'.*shape"):
        StarfishStrategy().run(ctx)
    assert [s.round for s in states] == [1]
