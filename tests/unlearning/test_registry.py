"""The strategy registry, the plaintext/secure split and what the secure-capable strategies reveal."""

from __future__ import annotations

import pytest
import torch

from mpc.backend import Secret
from mpc.plain_backend import PlainBackend
from unlearning import registry
from unlearning.strategy import Strategy, UnlearningError

PLAINTEXT_ONLY = {"federaser", "fedadp"}
SECURE_CAPABLE = {"starfish", "retrain", "random", "puf", "fedrecover", "crab"}


class FlaggedSecureBackend(PlainBackend):
    """The plaintext reference flagged as secure, recording the shape of every reveal.

    It lets a test check that a strategy refuses (or accepts) a secure backend and that
    it reveals only what the protocol allows; it is not a 2PC implementation."""

    name = "flagged-secure"
    is_secure = True

    def __init__(self) -> None:
        super().__init__()
        self.revealed: list[tuple[int, ...]] = []

    def reveal(self, x: Secret) -> torch.Tensor:
        self.revealed.append(tuple(x.shape))
        return super().reveal(x)


def test_registry_lists_every_strategy():
    assert set(registry.names()) == PLAINTEXT_ONLY | SECURE_CAPABLE
    for name in registry.names():
        cls = registry.strategy_class(name)
        assert cls is registry.strategy_class(name)
        assert issubclass(cls, Strategy) and cls.name == name
        assert registry.requires_plaintext(name) == (name in PLAINTEXT_ONLY)
    assert {n for n in registry.names() if registry.needs_probe(n)} == {"fedadp"}  # Crab's probe is optional
    assert registry.job_names() == ["starfish", "random", "fedrecover", "crab"]


def test_unknown_and_unavailable_strategies_give_clear_errors(monkeypatch):
    with pytest.raises(UnlearningError, match="unknown strategy 'fedavg'"):
        registry.create("fedavg")
    monkeypatch.setitem(registry.STRATEGIES, "ghost", "unlearning.no_such_module:Ghost")
    with pytest.raises(UnlearningError, match="not available"):
        registry.create("ghost")


@pytest.mark.parametrize("name", sorted(PLAINTEXT_ONLY))
def test_plaintext_strategies_refuse_a_secure_backend(logreg_fl, name):
    logreg_fl.backend = FlaggedSecureBackend()
    with pytest.raises(UnlearningError, match="cannot run under 2PC"):
        registry.create(name).run(logreg_fl.context())
    assert logreg_fl.oracle.requests == []


@pytest.mark.parametrize("name,params", [("retrain", {"rounds": 3}), ("puf", {"recovery_rounds": 2})])
def test_secure_capable_baselines_reveal_only_model_updates(logreg_fl, name, params):
    backend = FlaggedSecureBackend()
    logreg_fl.backend = backend
    logreg_fl.history = logreg_fl.problem.history(backend)
    backend.revealed.clear()
    result = registry.create(name).run(logreg_fl.context(params=params))
    assert backend.revealed == [(6,)] * 3  # one aggregate per round, nothing per client
    assert result.report["backend"] == "flagged-secure"


def test_targets_are_validated(logreg_fl):
    for name in ("retrain", "federaser", "puf"):
        with pytest.raises(UnlearningError, match="unknown target"):
            registry.create(name).run(logreg_fl.context(targets=("c9",)))
        with pytest.raises(UnlearningError, match="every client is a target"):
            registry.create(name).run(logreg_fl.context(targets=tuple(logreg_fl.problem.clients)))


COMMON_REPORT_KEYS = {
    "strategy",
    "backend",
    "targets",
    "params",
    "stored_rounds",
    "rounds_used",
    "client_rounds",
    "target_rounds",
    "arp",
    "missing_answers",
    "timings",
    "start_model_round",
}


@pytest.mark.parametrize("name", sorted(PLAINTEXT_ONLY | SECURE_CAPABLE))
def test_every_strategy_returns_a_json_ready_report_and_a_finite_model(logreg_fl, name):
    import json

    result = registry.create(name).run(logreg_fl.context(params={"dp": False} if name == "fedadp" else {}))
    report = json.loads(json.dumps(result.report))
    assert report["strategy"] == name and report["targets"] == ["c0"]
    if name not in ("starfish", "random"):  # Starfish's own report layout (arp_percent, selection, ...)
        assert COMMON_REPORT_KEYS <= set(report)
        assert set(report["client_rounds"]) == {"c1", "c2", "c3", "c4"}
    assert result.model.dtype == torch.float32 and result.model.shape == (6,)
    assert torch.isfinite(result.model).all()
