"""A Flower app on Flower's Simulation Engine (Ray) through `StarfishMod` and
`StarfishFedAvg`, against both parties as real processes (TLS, job workers, dealer), all
inside a network namespace the test creates with loopback only (`helpers/flower_run.py`; Ray's
dashboard probes cloud metadata addresses, which must not leave the machine).

Four virtual clients train a tiny logistic regression for three rounds; the ServerApp then
unlearns the node with flipped labels (a 2PC job whose warm-up/correction tasks the
strategy relays to the Flower nodes) and trains two more rounds. Checks:

* every model the Flower side holds (passed to its evaluate_fn) is a committed global
  model of both parties, in order (same hash);
* each round's model equals Flower's FedAvg of the fitted models, recomputed here from the
  parties' M_{i−1} and membership (pseudo-gradient convention, fixed-point tolerance);
* no train reply carries a model to the Flower server;
* the unlearning job succeeds, its tasks were answered through Flower, and the next round
  starts from the unlearned model;
* the job's federated evaluation was answered by the remaining nodes' own evaluate function
  through Flower EVALUATE messages: revealed in the job report with at least k evaluators,
  its accuracies the ones the app's evaluate function gives at M̂ and M_T (recomputed here
  from the parties' models), and logged in Flower's output.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.local import LocalDeployment
from server.config import PrivacyConfig
from server.store import Store
from starfish_flower import offline, sandbox

from helpers.flower_app import accuracy, fit, node_data
from helpers.flower_run import CLIENTS, ROUNDS_AFTER, ROUNDS_BEFORE
from helpers.ray_dir import private_ray_dir

pytestmark = pytest.mark.timeout(600)
TESTS = Path(__file__).resolve().parents[1]  #: on the run's PYTHONPATH, for the helpers package


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    if not sandbox.available():
        pytest.fail("cannot create a network namespace (unshare --net): the simulation would reach outside addresses")
    tmp = tmp_path_factory.mktemp("flower")
    root, out = tmp / "dep", tmp / "result.json"
    # the checkout before tests/: its folders share names with the packages they test
    path = os.pathsep.join(p for p in (str(TESTS.parent), str(TESTS), os.environ.get("PYTHONPATH")) if p)
    command = sandbox.loopback_only([sys.executable, str(TESTS / "helpers" / "flower_run.py"), str(root), str(out)])
    try:
        with private_ray_dir() as ray_env:  # switches set before the run imports flwr
            env = {**os.environ, **offline.SWITCHES, **ray_env, "PYTHONPATH": path}
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=540, check=False)
    except subprocess.TimeoutExpired as exc:  # the namespace's processes die with it
        tail = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr or ""
        pytest.fail(f"the simulation did not end within {exc.timeout} s (logs in {root / 'logs'}):\n{tail[-3000:]}")
    assert out.exists(), f"the simulation wrote no result (exit {done.returncode}):\n{done.stderr[-3000:]}"
    record = json.loads(out.read_text())
    assert "error" not in record, record["error"]
    assert done.returncode == 0, done.stderr[-3000:]
    record["output"] = done.stdout + done.stderr
    return LocalDeployment(root), record


def test_flower_models_are_the_parties_models_in_order(run):
    dep, record = run
    stores = [Store(dep.data_dir(r), r, readonly=True) for r in (0, 1)]
    latest = stores[0].latest_committed()
    assert latest == ROUNDS_BEFORE + 1 + ROUNDS_AFTER  # + 1: the unlearned model is a global model
    expected = [stores[0].global_model_hash(i) for i in range(latest + 1)]
    assert expected == [stores[1].global_model_hash(i) for i in range(latest + 1)]
    assert record["flower_hashes"] == expected
    assert record["replies_with_arrays"] == 0
    assert record["error_replies"] == 0  # after the unlearning client0's node is no longer sampled


def test_each_round_is_flower_fedavg_of_the_fitted_models(run):
    dep, record = run
    store = Store(dep.data_dir(1), 1, readonly=True)
    for done in record["rounds"]:
        before = store.global_model(done["round"] - 1).params
        members = store.round_members(done["round"])
        assert members == done["members"]
        assert set(members) == set(CLIENTS) - ({"client0"} if done["round"] > ROUNDS_BEFORE else set())
        fitted = {c: np.concatenate(fit(before[:-1], before[-1:], CLIENTS.index(c))[:2]) for c in members}
        weights = store.round_weights(done["round"])  # n_j, capped so no principal holds over 1/k of the round
        expected = sum(weights[c] * fitted[c].astype(np.float64) for c in members) / sum(weights.values())
        np.testing.assert_allclose(store.global_model(done["round"]).params, expected, atol=1e-4)
        assert all(members[c] == len(node_data(CLIENTS.index(c))[1]) for c in members)


def test_unlearning_through_flower_and_training_continues_from_the_unlearned_model(run):
    dep, record = run
    outcome = record["outcome"]
    assert outcome["succeeded"], outcome["error"]
    assert outcome["report"]["job"]["targets"] == ["client0"]
    assert record["tasks_answered"] > 0
    assert outcome["report"]["corrections"]["missing"] == 0
    store = Store(dep.data_dir(0), 0, readonly=True)
    unlearned_round = ROUNDS_BEFORE + 1
    assert store.global_model_hash(unlearned_round) == outcome["model_hash"] == outcome["arrays_hash"]
    assert store.round_record(unlearned_round + 1).model_in_hash == outcome["model_hash"]


def test_federated_evaluation_through_flower_is_published_and_logged(run):
    dep, record = run
    report = record["outcome"]["report"]
    evaluation = report["federated_evaluation"]
    assert evaluation["state"] == "revealed", evaluation
    remaining = [c for c in CLIENTS if c != "client0"]
    accepted = evaluation["evaluators"]["accepted"]
    assert sorted(accepted) == remaining and len(accepted) >= PrivacyConfig().min_cohort  # the run keeps k
    assert record["evaluations_answered"] == len(remaining)
    store = Store(dep.data_dir(0), 0, readonly=True)
    unlearned, replaced = (store.global_model(ROUNDS_BEFORE + d).params for d in (1, 0))
    data = [node_data(CLIENTS.index(c)) for c in remaining]
    total = sum(len(y) for _, y in data)
    for key, params in (("accuracy_new", unlearned), ("accuracy_old", replaced)):
        # the mod's counts: round(accuracy·n) per client, summed
        correct = sum(round(accuracy(params[:-1], params[-1:], x, y) * len(y)) for x, y in data)
        assert 0.0 <= evaluation[key] <= 1.0
        assert evaluation[key] == pytest.approx(correct / total)
    assert evaluation["sums"]["total"] == total
    line = (
        f"Starfish job {record['outcome']['job_id']}: federated evaluation by {len(remaining)} clients: "
        f"M̂ accuracy {100 * evaluation['accuracy_new']:.1f} %, M_T {100 * evaluation['accuracy_old']:.1f} %"
    )
    assert line in record["output"]
