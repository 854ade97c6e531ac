"""Attack: recover a client's gradient from a Stage I round it uploaded to alone.

The public models of a committed round give (M_{i−1} − M_i)/η = Σ_{j∈S} n_j·g_j / Σ_{j∈S} n_j,
so with S = {a} anyone holding M_0 and M_1 (every client, both parties) reads a's gradient.
Parties run as real processes on free ports; only client a uploads to round 1.

Recovery criterion: the attacker's estimate ĝ recovers g_a when ‖ĝ − g_a‖/‖g_a‖ < 1e-3; it
does not when ‖ĝ − g_a‖/‖g_a‖ ≥ 0.5 or cos(ĝ, g_a) ≤ 0.5 (no closer to g_a than an unrelated
vector of the same scale: an independent gradient g_b has relative error ≈ √2 and cosine ≈ 0).
Without a committed round the attacker's best estimate from public outputs is 0 (relative
error 1).

* k = 1 (built in code: the config file refuses it): the round commits with S = {a} and the
  gradient is recovered to fixed-point precision;
* k = 3 (the default): the round does not commit; it waits with a note and a metric, and
  nothing is revealed; once three clients uploaded it commits, and the aggregate is no
  estimate of a's gradient by the criterion;
* party0 at k = 1, party1 at the default k = 3: party1 refuses the one-member membership, the
  round fails with party1's reason, and no M_1 exists on either party.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from harness.local import REPO_ROOT, LocalDeployment
from server.store import Store

from helpers.metrics_scrape import scrape, value

pytestmark = pytest.mark.timeout(300)
HERE = Path(__file__).resolve().parent
CLIENTS = ["a", "b", "c"]
M = 64
LR = 0.5
N = 10  #: every client's n_j
DEADLINE_S = 1.0


def _gradient(client: str) -> np.ndarray:
    return np.random.default_rng(100 + CLIENTS.index(client)).normal(size=M)


def _deployment(root: Path) -> LocalDeployment:
    return LocalDeployment(root, clients=CLIENTS, rounds={"deadline_s": DEADLINE_S, "poll_s": 0.05, "max_rounds": 1})


def _start_with_k(dep: LocalDeployment, role: int, k: int) -> None:
    """Start party `role` from its config file with the minimum cohort k set in code (and the
    deployment's dealer, which the upload check of every round needs)."""
    (dep.root / "logs").mkdir(exist_ok=True)
    dep.start_dealer()
    with open(dep.root / "logs" / f"party{role}.log", "ab") as log:
        dep.procs[role] = subprocess.Popen(
            [sys.executable, str(HERE / "low_cohort_party.py"), str(dep.config_path(role)), str(k)],
            cwd=REPO_ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    dep.wait_healthy(role)


def _upload(dep: LocalDeployment, clients: list[str]) -> None:
    for c in clients:
        with dep.client(c) as sdk:
            sdk.register()
            view = sdk.wait_for_round(0, timeout_s=90)
            sdk.submit(view.round, _gradient(c), N, model_hash=view.model_hash)


def _register(dep: LocalDeployment) -> None:
    for c in CLIENTS:
        with dep.client(c) as sdk:
            sdk.register()


def _wait(dep: LocalDeployment, done, timeout_s: float = 120.0):
    end = time.time() + timeout_s
    with dep.admin() as admin:
        while time.time() < end:
            status = admin.status()
            if done(status):
                return status
            time.sleep(0.1)
    raise TimeoutError(f"round 1 did not reach the expected state: {status}")


def _estimate(dep: LocalDeployment) -> np.ndarray:
    """The attacker's estimate of a's gradient from the public models: (M_0 − M_1)/η, or 0 without M_1."""
    with dep.admin() as admin:
        m0 = admin.global_model(0)[1].astype(np.float64)
        if admin.status().latest_committed < 1:
            return np.zeros(M)
        return (m0 - admin.global_model(1)[1].astype(np.float64)) / LR


def _rel_err(estimate: np.ndarray, truth: np.ndarray) -> float:
    return float(np.linalg.norm(estimate - truth) / np.linalg.norm(truth))


def _cosine(estimate: np.ndarray, truth: np.ndarray) -> float:
    norm = np.linalg.norm(estimate) * np.linalg.norm(truth)
    return 0.0 if norm == 0 else float(estimate @ truth / norm)


def _store(dep: LocalDeployment, role: int) -> Store:
    return Store(dep.data_dir(role), role, readonly=True)


def _train(dep: LocalDeployment) -> None:
    with dep.admin() as admin:
        admin.start_training("toy", np.linspace(-1, 1, M).astype(np.float32), LR)


def test_k1_single_member_round_reveals_the_gradient(tmp_path):
    dep = _deployment(tmp_path / "dep")
    try:
        _start_with_k(dep, 1, 1)
        _start_with_k(dep, 0, 1)
        _train(dep)
        _register(dep)
        _upload(dep, ["a"])
        status = _wait(dep, lambda s: s.latest_committed >= 1)
        assert [m.client_id for m in status.rounds[0].members] == ["a"]
        estimate = _estimate(dep)
        err, cos = _rel_err(estimate, _gradient("a")), _cosine(estimate, _gradient("a"))
        print(f"k = 1: relative error {err:.2e}, cosine {cos:.6f}")
        assert err < 1e-3 and cos > 0.999999
    finally:
        dep.stop()


def test_default_k3_single_member_round_reveals_nothing(tmp_path):
    dep = _deployment(tmp_path / "dep")
    dep.start()
    try:
        _train(dep)
        _register(dep)
        _upload(dep, ["a"])
        time.sleep(4 * DEADLINE_S)  # several deadlines pass
        status = _wait(dep, lambda s: "fewer than the minimum cohort 3" in s.rounds[0].error)
        assert status.latest_committed == 0 and status.rounds[0].state == "open"
        assert "round 1 waits: 1 consistent upload(s)" in status.rounds[0].error
        assert value(scrape(dep.metrics_url(0)), "starfish_rounds_below_cohort_total", action="waiting") >= 2
        for role in (0, 1):  # the acknowledged upload stays held on both parties for the round
            assert list(_store(dep, role).uploads(1)) == ["a"]
        estimate = _estimate(dep)
        assert _rel_err(estimate, _gradient("a")) >= 0.5  # nothing published: the estimate is 0
        _upload(dep, ["b", "c"])  # the round reaches k = 3 and commits
        status = _wait(dep, lambda s: s.latest_committed >= 1)
        assert sorted(m.client_id for m in status.rounds[0].members) == CLIENTS
        estimate = _estimate(dep)
        truth = sum(_gradient(c) for c in CLIENTS) / len(CLIENTS)
        assert _rel_err(estimate, truth) < 1e-3  # the round published the 3-client aggregate
        err, cos = _rel_err(estimate, _gradient("a")), _cosine(estimate, _gradient("a"))
        print(f"k = 3: relative error {err:.3f}, cosine {cos:.3f}")
        assert err >= 0.5 or cos <= 0.5
    finally:
        dep.stop()


def test_party1_refuses_a_membership_below_its_own_k(tmp_path):
    dep = _deployment(tmp_path / "dep")
    try:
        dep.start(1)  # party1 from its file: the default k = 3
        _start_with_k(dep, 0, 1)  # party0 would aggregate a single upload
        _train(dep)
        _register(dep)
        _upload(dep, ["a"])
        status = _wait(dep, lambda s: s.rounds and s.rounds[0].state == "failed")
        assert "party1 refuses a membership of 1 client(s), fewer than its minimum cohort 3" in status.rounds[0].error
        assert status.latest_committed == 0
        log = (dep.root / "logs" / "party1.log").read_text()
        assert "party1 refuses a membership of 1 client(s)" in log
        assert value(scrape(dep.metrics_url(1)), "starfish_rounds_below_cohort_total", action="refused") >= 1
        for role in (0, 1):  # no M_1 and no candidate model on either party
            store = _store(dep, role)
            assert store.global_model_hash(1) is None and store.round_record(1).model_out_hash is None
    finally:
        dep.stop()
