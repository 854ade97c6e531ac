"""Stage II through the real service: party0, party1 and the dealer service as processes
(TLS everywhere, the MPC plane included), SDK clients in threads answering tasks; Stage I
trains 8 rounds first (the session fixture `stage2`, shared with the fault tests).

* bad requests are refused with a clear status and leave nothing queued;
* two requests (the second filed by the target client itself): the second queues behind
  the first (not interleaved); each job's model
  equals the plaintext Starfish run over the same history (relative L2 ≤ 1e-3, same
  selected rounds, flags and task events), becomes the new global model, and every share
  of its target is gone from both stores, with one erasure receipt per party;
* the dealer is a process of its own (no party spawns one); every report names the
  dealer certificate that served each session and the single-operator demo label, as
  does JobStatus;
* the CLI fetches a report and the model.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import grpc
import numpy as np
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from client_sdk.admin import AdminClient, request_own_unlearning
from client_sdk.errors import StarfishError
from harness.local import REPO_ROOT
from proto.starfish.v1 import admin_pb2, admin_pb2_grpc
from server.job_config import DEMO_DEALER_LABEL
from server.store import StoreError

from helpers.stage2_fixtures import STAGE2_ROUNDS as ROUNDS
from helpers.stage2_fixtures import plaintext_reference, relative_gap

PARAMS = {"beta": 0.25, "anchor_noise": False}  #: compared draw for draw with a plaintext run (no secret noise)
JOB_TIMEOUT_S = 150
EVERYONE = "every remaining client"


@pytest.fixture
def service(stage2):
    return stage2


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "targets,strategy,params,status,message",
    [
        (["nobody"], "starfish", {}, "NOT_FOUND", "unknown client"),
        (EVERYONE, "starfish", {}, "FAILED_PRECONDITION", "no remaining client"),
        ([], "starfish", {}, "INVALID_ARGUMENT", "no target"),
        (["c0", "c0"], "starfish", {}, "INVALID_ARGUMENT", "duplicate"),
        (["c0"], "starfish", {"sigma": 0}, "INVALID_ARGUMENT", "sigma must be in"),
        (["c0"], "starfish", {"alpha": 1.5}, "INVALID_ARGUMENT", "alpha must be in"),
        (["c0"], "starfish", {"beta": -0.1}, "INVALID_ARGUMENT", "beta must be in"),
        (["c0"], "starfish", {"B": 0}, "INVALID_ARGUMENT", "buffer_size must be"),
        (["c0"], "starfish", {"nonsense": 1}, "INVALID_ARGUMENT", "unknown parameter"),
        (["c0"], "federaser", {}, "INVALID_ARGUMENT", "not available as a 2PC job"),
        (["c0"], "starfish", {"eta_u": 10, "sigma": 1}, "INVALID_ARGUMENT", "eta_u = 10 is outside the operator's"),
        (["c0"], "starfish", {"B": 100}, "INVALID_ARGUMENT", "buffer_size = 100 is outside"),
        (["c0"], "starfish", {"sigma": float("nan")}, "INVALID_ARGUMENT", "sigma"),
        (["c0"], "starfish", {"eta": float("inf")}, "INVALID_ARGUMENT", "eta_u"),
    ],
)
def test_bad_requests_are_refused_and_nothing_is_queued(service, targets, strategy, params, status, message):
    if targets == EVERYONE:
        targets = [c for c in service.problem.data if c not in service.erased]
    with service.dep.admin() as admin:
        jobs_before, latest_before = len(admin.list_jobs().jobs), admin.status().latest_committed
        with pytest.raises(StarfishError, match=f"{status}.*{message}"):
            admin.unlearn(targets, strategy, params)
        assert len(admin.list_jobs().jobs) == jobs_before
        assert admin.status().latest_committed == latest_before


@pytest.mark.timeout(60)
def test_request_without_admin_credential_is_refused(service):
    """Without the admin token: refused; a client may only file its own unlearning."""
    with service.dep.admin() as admin:
        jobs_before = len(admin.list_jobs().jobs)
    intruder = AdminClient(service.dep.admin_address, "not-the-admin-token", service.dep.ca_cert)
    with pytest.raises(StarfishError, match="PERMISSION_DENIED"):
        intruder.unlearn(["c2"])
    with pytest.raises(StarfishError, match="PERMISSION_DENIED"):
        intruder.list_jobs()
    intruder.close()
    dep = service.dep
    creds = grpc.ssl_channel_credentials(root_certificates=dep.ca_cert.read_bytes())
    with grpc.secure_channel(dep.address(0), creds) as channel:  # a client asking for another client
        stub = admin_pb2_grpc.AdminServiceStub(channel)
        with pytest.raises(grpc.RpcError) as err:
            stub.Unlearn(
                admin_pb2.UnlearnRequest(targets=["c5"]),
                timeout=30,
                metadata=(("x-starfish-client", "c4"), ("x-starfish-token", dep.creds["clients"]["c4"])),
            )
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED and "only request its own" in err.value.details()
    with pytest.raises(StarfishError, match="UNAUTHENTICATED"):
        request_own_unlearning(dep.address(0), "c4", "a-wrong-token", dep.ca_cert)
    token = dep.creds["clients"]["c4"]  # a client gets the operator's parameters: it cannot choose its own
    with pytest.raises(StarfishError, match="PERMISSION_DENIED.*operator's parameters"):
        request_own_unlearning(dep.address(0), "c4", token, dep.ca_cert, {"eta_u": 10, "sigma": 1})
    with service.dep.admin() as admin:
        assert len(admin.list_jobs().jobs) == jobs_before


def _report(admin, job_id: str) -> dict:
    return json.loads(admin.job_report(job_id).report_json)


def _assert_matches_plaintext(service, admin, job_id: str, report: dict, erased_before: frozenset[str]) -> None:
    header, model = admin.job_model(job_id)
    assert header.model_hash == report["job"]["model_hash"]
    reference, ref_report = plaintext_reference(service, report, erased_before)
    assert report["backend"] == "crypten"
    assert report["selection"] == ref_report["selection"]
    assert report["flags"] == ref_report["flags"]
    assert [(e["t"], e["reason"], e["asked"]) for e in report["corrections"]["events"]] == [
        (e["t"], e["reason"], e["asked"]) for e in ref_report["corrections"]["events"]
    ]
    assert relative_gap(model, reference.numpy()) <= 1e-3


def _assert_dealer_recorded(service, report: dict, status) -> None:
    """The report names the dealer certificate that served each session; the demo label is on."""
    der = x509.load_pem_x509_certificate((service.dep.root / "certs" / "dealer.pem").read_bytes()).public_bytes(
        serialization.Encoding.DER
    )
    dealer = report["dealer"]
    assert dealer["label"] == status.dealer == DEMO_DEALER_LABEL and dealer["independent"] is False
    assert len(dealer["sessions"]) == report["job"]["session_attempts"]
    for session in dealer["sessions"]:
        assert session["session_id"].startswith(report["job"]["job_id"] + ".")
        assert session["dealer_identity"] == "dealer"
        assert session["dealer_certificate_sha256"] == hashlib.sha256(der).hexdigest()
        assert session["dealer_address"] == service.dep.dealer_address


def _assert_no_party_spawned_a_dealer(service) -> None:
    dealer = service.dep.dealer_proc
    assert dealer is not None and dealer.poll() is None
    parties = {p.pid for p in service.dep.procs.values()}
    ppid = int(open(f"/proc/{dealer.pid}/stat").read().rsplit(")", 1)[1].split()[1])
    assert ppid not in parties
    for pid in parties:  # a party's children are its job workers only
        out = subprocess.run(["ps", "-o", "args=", "--ppid", str(pid)], capture_output=True, text=True).stdout
        assert all("server.workers.worker" in line for line in out.splitlines()), out


def _assert_erased(service, target: str, report: dict) -> None:
    receipts = report["erasure"][target]
    assert sorted(r["party"] for r in receipts) == [0, 1]
    stored_in = list(range(1, ROUNDS + 1))  # the target took part in every Stage I round
    for receipt in receipts:
        assert receipt["rounds"] == stored_in and receipt["rows_deleted"] >= ROUNDS
    for role in (0, 1):
        store = service.store(role)
        try:
            assert store.is_erased(target)
            for i in stored_in:
                assert target not in store.uploads(i)
                with pytest.raises(StoreError):
                    store.load_share(i, target)
        finally:
            store.close()
        assert not list(service.dep.data_dir(role).rglob(f"{target}.i64"))


@pytest.mark.timeout(2 * JOB_TIMEOUT_S + 60)
def test_jobs_queue_match_plaintext_and_erase_their_targets(service):
    erased_before = frozenset(service.erased)
    with service.dep.admin() as admin:
        base = admin.status().latest_committed
        first = admin.unlearn(["c2"], parameters=PARAMS)
        dep = service.dep  # the second request comes from client c3 itself (its own credential)
        second = request_own_unlearning(dep.address(0), "c3", dep.creds["clients"]["c3"], dep.ca_cert, PARAMS)
        assert admin.job_status(second).state == admin_pb2.JOB_STATE_QUEUED
        with pytest.raises(StarfishError, match="FAILED_PRECONDITION.*queued or running"):
            admin.erase("c4")  # a running job needs every share it was filed against
        assert admin.wait_job(first, JOB_TIMEOUT_S).state == admin_pb2.JOB_STATE_SUCCEEDED
        done = admin.wait_job(second, JOB_TIMEOUT_S)
        assert done.state == admin_pb2.JOB_STATE_SUCCEEDED, done.error
        service.erased += ["c2", "c3"]
        r1, r2 = _report(admin, first), _report(admin, second)

        assert r2["job"]["started"] >= r1["job"]["finished"]  # queued, not interleaved
        assert r1["job"]["base_round"] == base and r2["job"]["base_round"] == base + 1
        _assert_no_party_spawned_a_dealer(service)
        for job_id, report, erased in ((first, r1, erased_before), (second, r2, erased_before | {"c2"})):
            _assert_matches_plaintext(service, admin, job_id, report, erased)
            _assert_dealer_recorded(service, report, admin.job_status(job_id))
            assert report["costs"]["UE"]["online_bytes"] > 0 and report["costs"]["UE"]["offline_bytes"] > 0
            assert set(report["revealed"]) >= {"selected_rounds", "aggregate_gradients", "correction_flags"}
            assert 0 <= report["arp_percent"] <= 100
        _assert_erased(service, "c2", r1)
        _assert_erased(service, "c3", r2)

        # the last unlearned model is the global model; clients train on it
        status = admin.status()
        assert status.latest_committed == base + 2
        assert status.latest_model_hash == r2["job"]["model_hash"]
        with service.dep.client("c4") as client:
            assert client.fetch_model().hash == r2["job"]["model_hash"]
        with pytest.raises(StarfishError, match="FAILED_PRECONDITION.*already erased"):
            admin.unlearn(["c2"])


@pytest.mark.timeout(120)
def test_cli_fetches_report_and_model(service, tmp_path):
    with service.dep.admin() as admin:
        done = [j.job_id for j in admin.list_jobs().jobs if j.state == admin_pb2.JOB_STATE_SUCCEEDED]
        assert done, "the job tests run first"
        _, model = admin.job_model(done[-1])
        target = _report(admin, done[-1])["job"]["targets"][0]
    cli = [sys.executable, "-m", "starfish_cli", "admin", "--dir", str(service.dep.root)]
    out = subprocess.run(
        cli + ["result", done[-1], "--out", str(tmp_path)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert "selected rounds" in out.stdout and f"erased {target} on party1" in out.stdout
    assert f"dealer: {DEMO_DEALER_LABEL}; sessions served by dealer (" in out.stdout
    assert "erasure certificate signed by party0 and party1" in out.stdout
    np.testing.assert_array_equal(np.load(tmp_path / "model.npy", allow_pickle=False), model)
    assert json.loads((tmp_path / "report.json").read_text())["job"]["job_id"] == done[-1]
