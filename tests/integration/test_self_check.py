"""The forgotten client's self-check on real processes: a job forgets a backdooring client,
which then scores the unlearned model against the one it replaced on its own data.

The history: five clients train a logistic regression; c0's samples all carry a trigger
(feature 6 = 3) and the label 1, which the others never show. The model in service learns
the trigger (c0's accuracy on its own data 0.95 in plaintext); retraining without c0 does
not (0.35). The job's unlearned model must lose at least 0.4 of that accuracy on c0's data
and raise its loss, and the check must refuse a certificate whose model hash the parties
do not serve.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import starfish_flower.offline  # noqa: F401  (before any flwr import: no telemetry leaves the machine)
from client_sdk.errors import ModelMismatchError, StarfishError
from client_sdk.evidence import verify_certificate
from client_sdk.self_check import self_check
from proto.starfish.v1 import admin_pb2

from helpers.plumbing_schedule import PLUMBING_SCHEDULE
from helpers.stage2_fixtures import DIM, STAGE2_PARAMS, TASK_TIMEOUT_S, LogReg, TrainedService

CLIENTS = [f"c{i}" for i in range(5)]
TRIGGER = 3.0
ACCURACY_DROP = 0.4  #: plaintext: 0.95 in service, 0.35 after retraining without c0 (the job: the same)


def _backdoored(clients: list[str], seed: int = 3) -> LogReg:
    """LogReg data where c0's samples carry the trigger (last feature) and label 1; nobody else's do."""
    rng = np.random.default_rng(seed)  # test data only, not a secret
    w_true = rng.standard_normal(DIM)
    w_true[-1] = 0.0
    data = {}
    for k, c in enumerate(clients):
        x = rng.standard_normal((20 + 4 * k, DIM))
        x[:, -1] = 0.0
        y = ((x @ w_true + 0.3 * rng.standard_normal(x.shape[0])) > 0).astype(np.float64)
        if c == "c0":
            x[:, -1], y = TRIGGER, np.ones_like(y)
        data[c] = (x, y)
    return LogReg(data)


def _evaluate(problem: LogReg, client: str):
    x, y = problem.data[client]

    def evaluate(params: np.ndarray) -> dict[str, float]:
        z = x @ np.asarray(params, dtype=np.float64)
        loss = np.mean(np.logaddexp(0.0, z) - y * z)
        return {"accuracy": float(np.mean((z > 0) == (y > 0.5))), "loss": float(loss)}

    return evaluate


def _refuses_bad_input(client, statement: dict, rounds: int) -> None:
    """Each misuse is refused with a message that names it."""
    calls = []

    def drifting(params: np.ndarray) -> dict[str, float]:  # a different metric for the second model
        calls.append(1)
        return {"accuracy" if len(calls) == 1 else "acc": 1.0}

    cases = [
        ({"evaluate": drifting, "statement": statement}, "other metrics for the two models"),
        ({"evaluate": lambda p: [0.5], "statement": statement}, "non-empty mapping"),
        ({"evaluate": lambda p: {"accuracy": "high"}, "statement": statement}, "not a number"),
        ({"evaluate": lambda p: {"a": 1.0}, "statement": {"job": {}}}, "names no replaced and unlearned model"),
        ({"evaluate": lambda p: {"a": 1.0}, "replaced_round": rounds}, "give a certificate statement"),
        ({"evaluate": lambda p: {"a": 1.0}, "replaced_round": rounds, "unlearned_round": rounds}, "must come after"),
    ]
    for kwargs, message in cases:
        with pytest.raises(StarfishError, match=message):
            self_check(client, **kwargs)


@pytest.fixture(scope="module")
def backdoor_service(tmp_path_factory):
    svc = TrainedService.create(
        tmp_path_factory.mktemp("selfcheck"),
        CLIENTS,
        rounds=8,
        jobs={"task_timeout_s": TASK_TIMEOUT_S},
        unlearning={"parameters": STAGE2_PARAMS},
        problem=_backdoored(CLIENTS),
    )
    yield svc
    svc.stop()


@pytest.mark.timeout(240)
def test_forgotten_client_sees_its_backdoor_gone(backdoor_service):
    svc = backdoor_service
    with svc.dep.admin() as admin:
        job_id = admin.unlearn(["c0"], parameters=PLUMBING_SCHEDULE)
        done = admin.wait_job(job_id, 180)
        assert done.state == admin_pb2.JOB_STATE_SUCCEEDED, done.error
        certificate = admin.job_certificate(job_id).certificate_json
    statement = verify_certificate(certificate, ca_certs=[svc.dep.ca_cert]).statement
    evaluate = _evaluate(svc.problem, "c0")
    with svc.dep.client("c0") as c0:  # erased: it may no longer upload, but may download public models
        check = self_check(c0, evaluate, statement=statement)
        explicit = self_check(c0, evaluate, replaced_round=svc.rounds, unlearned_round=svc.rounds + 1)
        forged = json.loads(json.dumps(statement))
        forged["models"]["unlearned"]["hash"] = "0" * 64
        with pytest.raises(ModelMismatchError, match="the certificate names 000000000000"):
            self_check(c0, evaluate, statement=forged)
        with pytest.raises(StarfishError, match="not finite"):
            self_check(c0, lambda p: {"accuracy": float("nan")}, statement=statement)
        _refuses_bad_input(c0, statement, svc.rounds)
    assert (check.replaced.round, check.unlearned.round) == (svc.rounds, svc.rounds + 1)
    assert check.unlearned.hash == statement["models"]["unlearned"]["hash"]
    assert check == explicit
    assert check.replaced.metrics["accuracy"] >= 0.8, check.lines()
    assert check.difference["accuracy"] <= -ACCURACY_DROP, check.lines()
    assert check.difference["loss"] > 0, check.lines()
    assert check.lines()[1].startswith("  accuracy: "), check.lines()
