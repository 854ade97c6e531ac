"""The baselines that run as jobs, filed through the real service: party0, party1 and the
dealer as processes (TLS, the MPC plane included), SDK clients in threads answering tasks,
8 Stage I rounds of a small logistic regression (a service of this module's own, so its
targets leave the shared Stage II service's clients alone).

* `starfish admin unlearn --strategy fedrecover` (then `crab`) files the job; its model
  equals the plaintext run of the same strategy over the same history (same decisions —
  FedRecover: round kinds, abnormality flags, curvature bits; Crab: selected rounds and
  clients, rollback point — same asks and release decisions with the party's k = 3;
  relative L2 ≤ 1e-3), becomes the new global model, the target's shares are gone from
  both stores and the job's erasure certificate, signed by both parties, verifies offline;
* the job report lists every value the job published, and the summary names the strategy;
* party1's worker killed (SIGKILL) once both parties hold checkpoint 3: the next session
  attempt resumes from it (`resumed_at`) and the job ends with the plaintext run's model.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from client_sdk.evidence import verify_certificate
from harness.local import REPO_ROOT
from proto.starfish.v1 import admin_pb2
from server.jobs.checkpoints import held_checkpoint
from server.store import StoreError
from unlearning import registry

from helpers.polling import poll
from helpers.stage2_fixtures import STAGE2_ROUNDS, plaintext_reference, relative_gap, stage2_service

JOB_TIMEOUT_S = 240
#: strategy → (target, parameters, decisions the job shares with the plaintext run, published kinds)
CASES = {
    "fedrecover": (
        "c0",
        {"warmup_rounds": 3, "correction_interval": 3, "final_tuning": 1, "tolerance_rate": 0.3},
        ("round_kinds", "abnormal", "curvature", "client_rounds", "release"),
        {"aggregate_gradients", "correction_flags", "curvature_bits"},
    ),
    "crab": (
        "c1",
        {"client_ratio": 0.6, "sensitivity_ratio": 0.0},  # β = 0: back to before the target's first round
        ("round_score", "selected_rounds", "selected_clients", "rollback_round", "recovery_rounds", "client_rounds")
        + ("release",),
        {"aggregate_gradients", "selected_rounds", "kept_bits", "rollback_index"},
    ),
}


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    with stage2_service(tmp_path_factory.mktemp("strategy-jobs")) as svc:
        yield svc


def _cli(service, *args: str) -> subprocess.CompletedProcess:
    """`starfish admin --dir <deployment> <args>`."""
    return subprocess.run(
        [sys.executable, "-m", "starfish_cli", "admin", "--dir", str(service.dep.root), *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _file_with_cli(service, target: str, strategy: str, params: dict) -> str:
    """`starfish admin unlearn <target> --strategy <strategy> --params <json>`; returns the job id."""
    out = _cli(service, "unlearn", target, "--strategy", strategy, "--params", json.dumps(params))
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1]


def _assert_erased(service, target: str, report: dict) -> None:
    receipts = report["erasure"][target]
    assert sorted(r["party"] for r in receipts) == [0, 1]
    for role in (0, 1):
        store = service.store(role)
        try:
            assert store.is_erased(target)
            for i in range(1, STAGE2_ROUNDS + 1):
                assert target not in store.uploads(i)
                with pytest.raises(StoreError):
                    store.load_share(i, target)
        finally:
            store.close()


def _assert_certificate(service, admin, job_id: str, report: dict, target: str) -> None:
    reply = admin.job_certificate(job_id)
    assert reply.status == "signed" and report["certificate"]["status"] == "signed"
    check = verify_certificate(reply.certificate_json, [service.dep.ca_cert])
    assert [s.signer for s in check.signers] == ["party0", "party1"]
    statement = check.statement
    assert statement["job"]["strategy"] == report["job"]["strategy"] and statement["job"]["targets"] == [target]
    assert statement["models"]["unlearned"]["hash"] == report["job"]["model_hash"]
    assert statement["erasure"][target]["member_rounds"] == list(range(1, STAGE2_ROUNDS + 1))


@pytest.mark.timeout(JOB_TIMEOUT_S + 120)
@pytest.mark.parametrize("strategy", list(CASES))
def test_a_baseline_job_matches_plaintext_erases_and_is_certified(service, strategy, tmp_path):
    target, params, decisions, kinds = CASES[strategy]
    with service.dep.admin() as admin:
        base = admin.status().latest_committed
        erased_before = frozenset(service.erased)
        job_id = _file_with_cli(service, target, strategy, params)
        done = admin.wait_job(job_id, JOB_TIMEOUT_S)
        assert done.state == admin_pb2.JOB_STATE_SUCCEEDED, done.error
        service.erased.append(target)
        report = json.loads(admin.job_report(job_id).report_json)
        assert report["job"]["strategy"] == strategy and report["backend"] == "crypten"
        operator = {"min_cohort": 3, "anchor_noise": False}  # the party's k; the service's noise switch
        canonical = registry.strategy_class(strategy).parse_params({**params, **operator}).as_dict
        assert report["job"]["parameters"] == canonical  # every default filled in, the operator's applied
        _, model = admin.job_model(job_id)
        reference, ref = plaintext_reference(service, report, erased_before)
        for key in decisions:
            assert report[key] == ref[key], key
        asks = [(e["t"], e["reason"], e["asked"]) for e in report["corrections"]["events"]]
        assert asks and asks == [(e["t"], e["reason"], e["asked"]) for e in ref["corrections"]["events"]]
        assert relative_gap(model, reference.numpy()) <= 1e-3
        assert report["release"]["revealed_updates"] > 0
        assert set(report["revealed"]) >= kinds
        assert report["revealed"]["aggregate_gradients"]["cohort"] >= 3
        assert admin.status().latest_committed == base + 1
        assert admin.status().latest_model_hash == report["job"]["model_hash"]
        assert f"with {strategy}" in admin.job_report(job_id).summary
        _assert_erased(service, target, report)
        _assert_certificate(service, admin, job_id, report, target)
    page = tmp_path / "report.html"  # the report page renders this strategy's report
    out = _cli(service, "report", job_id, "--html", str(page))
    assert out.returncode == 0, out.stderr
    assert strategy in page.read_text() and "erasure certificate" in page.read_text().lower()


def _kill_party1_worker_after(service, job_id: str, checkpoint: int) -> None:
    """SIGKILL party1's worker once both parties hold `checkpoint` of the job."""
    pid_file = service.job_dir(1, job_id) / "worker.pid"

    def held() -> bool:
        return min(held_checkpoint(service.job_dir(role, job_id)) for role in (0, 1)) >= checkpoint

    if poll(lambda: held() and pid_file.exists(), JOB_TIMEOUT_S, 0.02) is None:
        raise AssertionError(f"no checkpoint {checkpoint} of {job_id}")
    os.kill(int(pid_file.read_text()), signal.SIGKILL)


@pytest.mark.timeout(2 * JOB_TIMEOUT_S + 120)
@pytest.mark.parametrize("strategy,target", [("fedrecover", "c2"), ("crab", "c3")])
def test_a_killed_worker_resumes_the_baseline_job_from_its_checkpoint(service, strategy, target):
    _, params, decisions, _ = CASES[strategy]
    with service.dep.admin() as admin:
        erased_before = frozenset(service.erased)
        job_id = admin.unlearn([target], strategy, params)
        _kill_party1_worker_after(service, job_id, 3)
        done = admin.wait_job(job_id, JOB_TIMEOUT_S)
        assert done.state == admin_pb2.JOB_STATE_SUCCEEDED, done.error
        service.erased.append(target)
        report = json.loads(admin.job_report(job_id).report_json)
        _, model = admin.job_model(job_id)
    assert report["job"]["session_attempts"] >= 2 and report["resumed_at"] and report["resumed_at"][0] >= 3
    reference, ref = plaintext_reference(service, report, erased_before)
    for key in decisions:
        assert report[key] == ref[key], key
    assert relative_gap(model, reference.numpy()) <= 1e-3
