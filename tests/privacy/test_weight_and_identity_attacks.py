"""Attacks on a Stage I round by clients that lie about their weight or hold several identities.

The public models of a committed round give ĝ = (M_{i−1} − M_i)/η = Σ_{j∈S} w_j·g_j / Σ_{j∈S} w_j
(docs/PRIVACY.md, "Minimum cohort"). Parties run as real processes on free ports, with the
default minimum cohort k = 3.

* Skewed weight: honest a reports n_a = 10^6, honest b and c report n = 1. FedAvg with
  w_j = n_j makes ĝ ≈ g_a (relative error ~1e-6) although the round has three members; with
  the weights capped so that no principal holds more than 1/k of the round
  (unlearning.weight_cap) the round publishes (g_a + g_b + g_c)/3.
* Two identities: s1 and s2, both enrolled for one principal, upload zeros with n = 1 next to
  victim a. Counted by identity the round commits with 3 members and 3·ĝ = g_a; counted by
  principal it has 2 < k and does not commit. Once honest b uploads it commits, the attacker's
  pooled weight is capped at 1/k, and the best the attacker can read (W·ĝ/w_a, knowing its
  own zeros) is g_a + g_b.

Criterion as in test_single_member_round.py: recovered when the relative error is < 1e-3,
not recovered when it is ≥ 0.5 or the cosine ≤ 0.5. Each test prints both numbers.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from harness.local import LocalDeployment
from server.store import Store

pytestmark = pytest.mark.timeout(300)
M = 64
LR = 0.5
DEADLINE_S = 1.0


def _gradient(client: str) -> np.ndarray:
    return np.random.default_rng(sum(map(ord, client))).normal(size=M)


def _deployment(root: Path, clients: list[str], principals: dict[str, str]) -> LocalDeployment:
    rounds = {"deadline_s": DEADLINE_S, "poll_s": 0.05, "max_rounds": 1}
    return LocalDeployment(root, clients=clients, principals=principals, rounds=rounds)


def _start(dep: LocalDeployment, clients: list[str]) -> None:
    dep.start()
    with dep.admin() as admin:
        admin.start_training("toy", np.linspace(-1, 1, M).astype(np.float32), LR)
    for c in clients:
        with dep.client(c) as sdk:
            sdk.register()


def _upload(dep: LocalDeployment, uploads: dict[str, tuple[np.ndarray, int]]) -> None:
    for c, (gradient, n) in uploads.items():
        with dep.client(c) as sdk:
            view = sdk.wait_for_round(0, timeout_s=90)
            sdk.submit(view.round, gradient, n, model_hash=view.model_hash)


def _wait(dep: LocalDeployment, done, timeout_s: float = 120.0):
    end = time.time() + timeout_s
    with dep.admin() as admin:
        while time.time() < end:
            status = admin.status()
            if done(status):
                return status
            time.sleep(0.1)
    raise TimeoutError(f"round 1 did not reach the expected state: {status}")


def _published(dep: LocalDeployment) -> np.ndarray:
    """ĝ = (M_0 − M_1)/η from the public models, or 0 when no M_1 was published."""
    with dep.admin() as admin:
        m0 = admin.global_model(0)[1].astype(np.float64)
        if admin.status().latest_committed < 1:
            return np.zeros(M)
        return (m0 - admin.global_model(1)[1].astype(np.float64)) / LR


def _errors(estimate: np.ndarray, truth: np.ndarray) -> tuple[float, float]:
    norm = np.linalg.norm(estimate) * np.linalg.norm(truth)
    cosine = 0.0 if norm == 0 else float(estimate @ truth / norm)
    return float(np.linalg.norm(estimate - truth) / np.linalg.norm(truth)), cosine


def _weights(dep: LocalDeployment, role: int) -> dict[str, int]:
    return Store(dep.data_dir(role), role, readonly=True).round_weights(1)


def test_a_client_with_a_huge_weight_is_not_isolated(tmp_path):
    clients = ["a", "b", "c"]
    dep = _deployment(tmp_path / "dep", clients, {})
    try:
        _start(dep, clients)
        _upload(dep, {"a": (_gradient("a"), 1_000_000), "b": (_gradient("b"), 1), "c": (_gradient("c"), 1)})
        status = _wait(dep, lambda s: s.latest_committed >= 1)
        assert {m.client_id: m.n_samples for m in status.rounds[0].members} == {"a": 1_000_000, "b": 1, "c": 1}
        for role in (0, 1):  # each party aggregated with the capped weights
            assert _weights(dep, role) == {"a": 1, "b": 1, "c": 1}
        estimate = _published(dep)
        mean = sum(_gradient(c) for c in clients) / 3
        assert _errors(estimate, mean)[0] < 1e-3  # the round published the capped FedAvg
        err, cos = _errors(estimate, _gradient("a"))
        print(f"skewed weight: relative error {err:.3f}, cosine {cos:.3f}")
        assert err >= 0.5 or cos <= 0.5
    finally:
        dep.stop()


def test_two_identities_of_one_principal_do_not_make_a_cohort(tmp_path):
    clients = ["a", "b", "s1", "s2"]
    dep = _deployment(tmp_path / "dep", clients, {"s1": "mallory", "s2": "mallory"})
    try:
        _start(dep, clients)
        zeros = np.zeros(M)
        _upload(dep, {"s1": (zeros, 1), "s2": (zeros, 1), "a": (_gradient("a"), 1)})
        time.sleep(4 * DEADLINE_S)  # several deadlines pass
        status = _wait(dep, lambda s: "fewer than the minimum cohort 3" in s.rounds[0].error)
        assert status.latest_committed == 0 and status.rounds[0].state == "open"
        assert "round 1 waits: 2 consistent upload(s)" in status.rounds[0].error
        err, cos = _errors(_published(dep), _gradient("a"))
        print(f"two identities, round waiting: relative error {err:.3f}, cosine {cos:.3f}")
        assert err >= 0.5 or cos <= 0.5

        _upload(dep, {"b": (_gradient("b"), 1)})  # a third principal: the round commits
        _wait(dep, lambda s: s.latest_committed >= 1)
        weights = _weights(dep, 0)
        assert weights == _weights(dep, 1)
        assert weights["s1"] + weights["s2"] <= sum(weights.values()) / 3  # the principal's pooled weight
        attacker = _published(dep) * sum(weights.values()) / weights["a"]  # its own uploads are zeros
        err, cos = _errors(attacker, _gradient("a"))
        print(f"two identities, committed with b: relative error {err:.3f}, cosine {cos:.3f}")
        assert err >= 0.5 or cos <= 0.5
    finally:
        dep.stop()
