"""Evidence from a real job (shared Stage II service, fixture `certified_job`, target c6):

* both parties signed the job's erasure certificate; it verifies offline with the
  deployment's CA, names the models the job replaced and installed and both parties'
  receipts, and the command-line tools fetch, save and verify it (and the model);
* party1 refuses to sign a statement its own records do not confirm, each time naming
  what differs, and signs the true one;
* the parties' metrics and logs show the job: attempts, step durations and bytes,
  the certificate, the erasure, and the job's request id on both parties.
"""

from __future__ import annotations

import json
import subprocess
import sys

import grpc
import numpy as np
import pytest

from client_sdk.evidence import model_matches, verify_certificate
from harness.local import REPO_ROOT
from proto.certificate import canonical_json, signing_payload
from proto.certificate_verify import verify_document
from proto.starfish.v1 import peer_pb2, peer_pb2_grpc
from server.evidence.statement import receipt_entry

from helpers.metrics_scrape import scrape, value
from helpers.stage2_fixtures import STAGE2_ROUNDS as ROUNDS

pytestmark = pytest.mark.timeout(400)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "starfish_cli", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_job_certificate_is_signed_by_both_parties_and_verifies(stage2, certified_job):
    job_id, report, reply = certified_job
    assert reply.status == "signed" and report["certificate"]["status"] == "signed"
    check = verify_certificate(reply.certificate_json, [stage2.dep.ca_cert])
    st = check.statement
    assert [s.signer for s in check.signers] == ["party0", "party1"]
    assert st["job"]["id"] == job_id and st["job"]["targets"] == ["c6"]
    assert st["models"]["replaced"] == {
        "global_round": report["job"]["base_round"],
        "hash": report["job"]["base_model_hash"],
    }
    assert st["models"]["unlearned"]["hash"] == report["job"]["model_hash"]
    assert st["models"]["unlearned"]["global_round"] == report["job"]["base_round"] + 1
    erasure = st["erasure"]["c6"]
    assert erasure["member_rounds"] == list(range(1, ROUNDS + 1))
    assert [erasure["receipts"][f"party{r['party']}"] for r in report["erasure"]["c6"]] == [
        receipt_entry(r) for r in report["erasure"]["c6"]
    ]
    assert st["history"]["selected_rounds"] == report["selection"]["selected_rounds"]
    for kind, entry in st["revealed"].items():  # the report adds cohorts, ε and the published models
        assert {k: report["revealed"][kind][k] for k in entry} == entry
    assert report["certificate"]["statement_sha256"] == check.verification.statement_sha256


def test_admin_and_verify_commands(stage2, certified_job, tmp_path):
    job_id, _, _ = certified_job
    root = str(stage2.dep.root)
    saved = _cli("admin", "--dir", root, "certificate", job_id, "--out", str(tmp_path / "cert.json"))
    assert saved.returncode == 0, saved.stderr
    assert "VALID" in saved.stdout and "It does not prove" in saved.stdout
    result = _cli("admin", "--dir", root, "result", job_id, "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "out" / "certificate.json").read_text()) == json.loads(
        (tmp_path / "cert.json").read_text()
    )
    ok = _cli("verify", str(tmp_path / "cert.json"), "--dir", root, "--model", str(tmp_path / "out" / "model.npy"))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "is the unlearned model" in ok.stdout
    statement = json.loads((tmp_path / "cert.json").read_text())["statement"]
    model = np.load(tmp_path / "out" / "model.npy")
    assert model_matches(statement, model) and not model_matches(statement, model + 1e-3)
    np.save(tmp_path / "other.npy", model + 1e-3)
    bad = _cli("verify", str(tmp_path / "cert.json"), "--dir", root, "--model", str(tmp_path / "other.npy"))
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert bad.stdout.splitlines()[0].startswith("MODEL MISMATCH:"), bad.stdout


def _peer_stub(dep):
    """party1's peer service, called with party0's own TLS identity (as party0 does)."""
    certs = dep.root / "certs"
    creds = grpc.ssl_channel_credentials(
        root_certificates=(certs / "ca.pem").read_bytes(),
        private_key=(certs / "party0.key").read_bytes(),
        certificate_chain=(certs / "party0.pem").read_bytes(),
    )
    port = dep.creds["ports"]["peer1"]
    channel = grpc.secure_channel(f"127.0.0.1:{port}", creds, options=[("grpc.ssl_target_name_override", "party1")])
    return channel, peer_pb2_grpc.PeerServiceStub(channel)


def _ask(stub, job_id: str, statement: dict):
    request = peer_pb2.CertificateRequest(job_id=job_id, statement_json=canonical_json(statement).decode())
    return stub.SignCertificate(request, timeout=30)


@pytest.mark.parametrize(
    "path,value,message",
    [
        (("models", "unlearned", "hash"), "0" * 64, "models.unlearned.hash: the statement says"),
        (("erasure", "c6", "receipts", "party1", "bytes_deleted"), 1, "erasure.c6.receipts.party1.bytes_deleted"),
        (("erasure", "c6", "receipts", "party0", "rounds"), [1, 2], "omits rounds [3, 4, 5, 6, 7, 8]"),
        (("history", "selected_rounds"), [1], "history.selected_rounds"),
        (("job", "targets"), ["c5"], "job.targets"),
    ],
)
def test_party1_refuses_what_its_records_do_not_confirm(stage2, certified_job, path, value, message):
    job_id, _, reply = certified_job
    statement = json.loads(reply.certificate_json)["statement"]
    node = statement
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    channel, stub = _peer_stub(stage2.dep)
    with channel, pytest.raises(grpc.RpcError) as err:
        _ask(stub, job_id, statement)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "party1 will not sign" in err.value.details() and message in err.value.details()


def test_party1_refuses_an_unknown_job_and_signs_the_true_statement(stage2, certified_job):
    job_id, _, reply = certified_job
    doc = json.loads(reply.certificate_json)
    channel, stub = _peer_stub(stage2.dep)
    with channel:
        with pytest.raises(grpc.RpcError, match="knows no job jffffffffffff"):
            _ask(stub, "jffffffffffff", doc["statement"])
        entry = _ask(stub, job_id, doc["statement"])
    assert entry.signer == "party1"
    doc["signatures"][1] = {
        k: getattr(entry, k) for k in ("signer", "signed_at", "algorithm", "signature", "certificate")
    }
    from cryptography import x509

    ca = x509.load_pem_x509_certificate(stage2.dep.ca_cert.read_bytes())
    assert verify_document(doc, [ca]).valid
    assert signing_payload(doc["statement"], "party1", entry.signed_at)  # the payload party1 signed


def test_metrics_and_logs_show_the_job(stage2, certified_job):
    job_id, report, _ = certified_job
    p0, p1 = scrape(stage2.dep.metrics_url(0)), scrape(stage2.dep.metrics_url(1))
    for samples in (p0, p1):
        assert value(samples, "starfish_job_attempts_total") >= 1
        assert value(samples, "starfish_jobs_finished_total", state="succeeded") >= 1
        assert value(samples, "starfish_mpc_step_seconds_count", step="UE") >= 1
        assert value(samples, "starfish_mpc_step_bytes_total", step="UE", phase="online") > 0
        assert value(samples, "starfish_clients_erased_total") >= 1
        assert value(samples, "starfish_rounds_committed_total") >= ROUNDS
        assert value(samples, "starfish_uploads_accepted_total", kind="task", duplicate="false") > 0
        assert value(samples, "starfish_store_bytes", kind="shares") > 0
        assert value(samples, "starfish_job_running") == 0
    # the dealer's traffic (to both parties) is in party0's ledger
    assert value(p0, "starfish_mpc_step_bytes_total", step="UE", phase="offline") > 0
    assert value(p0, "starfish_certificates_total", outcome="signed") >= 1
    assert value(p0, "starfish_peer_up") == 1
    assert value(p1, "starfish_peer_last_contact_timestamp_seconds") > report["job"]["started"]
    logs = {r: (stage2.dep.root / "logs" / f"party{r}.log").read_text() for r in (0, 1)}
    assert f"[job-{job_id}]" in logs[0] and "erasure certificate signed by party0 and party1" in logs[0]
    signed = [line for line in logs[1].splitlines() if f"job {job_id}: erasure certificate checked and signed" in line]
    assert signed and f"[job-{job_id}]" in signed[0]  # party0's request id, forwarded (later: the tests' own calls)
