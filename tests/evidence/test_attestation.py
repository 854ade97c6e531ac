"""What a party checks before signing an erasure certificate (`server.evidence`), on a real
store and job record: its own view is signable; any field its records do not confirm is
refused with the path of the difference; the other party's receipt must cover every round
in which the target was a member; a target that is not erased cannot be attested."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mpc.fixedpoint import random_ring
from server.evidence.attestation import AttestationRefused, check_statement, first_difference
from server.evidence.statement import ViewError, party_view, receipt_entry, with_peer_receipts
from server.jobs.jobstore import JobStore
from server.store import Store

M = 8
ROUNDS = 3
CLIENTS = ("a", "b", "c")


def _trained(root: Path, role: int) -> tuple[Store, str]:
    """Three committed rounds of clients a, b, c (c misses round 2) and an unlearned model M_4."""
    store = Store(root, role)
    digest = store.install_initial_model("toy", np.zeros(M, dtype=np.float32), 0.1)
    for i in range(1, ROUNDS + 1):
        store.open_round(i, digest, deadline=1e12, lr=0.1)
        members = {c: 4 for c in CLIENTS if not (c == "c" and i == 2)}
        for c in members:
            store.put_upload(i, c, 4, random_ring(M), random_ring(1), random_ring(1), digest)
        store.set_round_state(i, "closed")
        store.set_membership(i, members)
        store.set_round_output(i, "toy", np.full(M, i, dtype=np.float32), peer_bytes=0)
        digest = store.commit_round(i)
    unlearned = store.install_global_model(ROUNDS + 1, "toy", np.full(M, -1, dtype=np.float32), 0.1)
    return store, unlearned


@pytest.fixture
def party(tmp_path):
    """party1's records of a finished job that unlearned client c."""
    store, unlearned = _trained(tmp_path / "data", 1)
    jobs = JobStore(tmp_path / "data")
    job = jobs.add("j000000000001", ["c"], "starfish", '{"beta": 0.25}', state="running")
    jobs.update(job.job_id, base_round=ROUNDS, base_model_hash=store.global_model_hash(ROUNDS), model_hash=unlearned)
    run = {
        "params": {"beta": 0.25, "sigma": 0.6},
        "stored_rounds": ROUNDS,
        "selection": {"method": "secrs", "selected_rounds": [1, 3]},
        "flags": [{"t": 1, "round": 1, "flags": {"a": True, "b": False}}],
        "arp_percent": 66.66666666666667,
        "revealed": {"selected_rounds": {"count": 2, "values": [3, 1], "why": "top-T' payload of SecRS"}},
    }
    (jobs.job_dir(job.job_id) / "worker-report.json").write_text(json.dumps(run))
    jobs.finish(job.job_id, "succeeded", model_hash=unlearned)
    return store, jobs, jobs.get(job.job_id)


def _statement(party) -> dict:
    """party0's statement as party0 would send it: party1's view plus party0's receipt."""
    store, jobs, job = party
    store.erase_client("c")
    view = party_view(1, job, store, jobs.job_dir(job.job_id))
    theirs = {"party": 0, "client": "c", "rounds": [1, 3], "files_deleted": 2, "bytes_deleted": 128,
              "rows_deleted": 2, "erased_at": 1.0, "content_sha256": ["d" * 64, "e" * 64]}  # fmt: skip
    return with_peer_receipts(view, {"c": [theirs]}, peer=0), view


def test_the_true_statement_is_signable(party):
    statement, view = _statement(party)
    check_statement(statement, view, role=1)
    assert statement["erasure"]["c"]["member_rounds"] == [1, 3]  # c missed round 2
    assert statement["models"]["unlearned"]["global_round"] == ROUNDS + 1
    mine = statement["erasure"]["c"]["receipts"]["party1"]
    assert mine == receipt_entry(vars(party[0].erasure_receipt("c"))) and mine["rounds"] == [1, 3]


@pytest.mark.parametrize(
    "path,value,message",
    [
        (("models", "unlearned", "hash"), "f" * 64, "models.unlearned.hash"),
        (("models", "replaced", "global_round"), 2, "models.replaced.global_round"),
        (("job", "parameters", "sigma"), 0.5, "job.parameters.sigma"),
        (("history", "arp_percent"), 50.0, "history.arp_percent"),
        (("revealed", "selected_rounds", "values"), [1, 3], "revealed.selected_rounds.values[0]"),
        (("erasure", "c", "receipts", "party1", "rows_deleted"), 9, "erasure.c.receipts.party1.rows_deleted"),
        (("erasure", "c", "member_rounds"), [1, 2, 3], "erasure.c.member_rounds"),
    ],
)
def test_a_field_the_records_do_not_confirm_is_refused(party, path, value, message):
    statement, view = _statement(party)
    node = statement
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(AttestationRefused, match=message.replace("[", r"\[").replace("]", r"\]")):
        check_statement(statement, view, role=1)


def test_the_other_partys_receipt_must_cover_the_member_rounds(party):
    statement, view = _statement(party)
    statement["erasure"]["c"]["receipts"]["party0"]["rounds"] = [1]
    with pytest.raises(AttestationRefused, match=r"omits rounds \[3\] in which c was a member"):
        check_statement(statement, view, role=1)
    statement["erasure"]["c"]["receipts"]["party0"] = {**statement["erasure"]["c"]["receipts"]["party1"]}
    with pytest.raises(AttestationRefused, match="is not party0's receipt for c"):
        check_statement(statement, view, role=1)
    del statement["erasure"]["c"]["receipts"]["party0"]
    with pytest.raises(AttestationRefused, match="has no receipt of party0"):
        check_statement(statement, view, role=1)


def test_an_extra_target_is_refused(party):
    statement, view = _statement(party)
    statement["erasure"]["b"] = statement["erasure"]["c"]
    with pytest.raises(AttestationRefused, match="erasure.b"):
        check_statement(statement, view, role=1)


def test_a_target_that_is_not_erased_cannot_be_attested(party):
    store, jobs, job = party
    with pytest.raises(ViewError, match="c is not erased on party1"):
        party_view(1, job, store, jobs.job_dir(job.job_id))


def test_a_model_other_than_the_installed_one_cannot_be_attested(party):
    store, jobs, job = party
    store.erase_client("c")
    jobs.update(job.job_id, model_hash="9" * 64)
    with pytest.raises(ViewError, match=f"global model {ROUNDS + 1} here is"):
        party_view(1, jobs.get(job.job_id), store, jobs.job_dir(job.job_id))


def test_first_difference_compares_canonically():
    assert first_difference({"a": [1, 2.0]}, {"a": [1, 2]}) is None  # 2.0 and 2 are the same JSON number
    assert first_difference({"a": {"b": 1}}, {"a": {"b": 1, "c": None}}) is None  # absent and null match
    assert first_difference({"a": [1, 2]}, {"a": [1, 2, 3]})[0] == "a"
    assert first_difference({"a": "x"}, {"a": "y"}) == ("a", "x", "y")


def test_a_party_refuses_to_start_with_a_signing_key_it_cannot_use(tmp_path):
    """`load_identity` checks what a verifier will: the right party, the signing usage, a matching key."""
    from mpc.plane.certificate_authority import make_certs
    from server.config import parse_config
    from server.evidence.signing import SigningError, load_identity

    make_certs(tmp_path)
    base = {
        "role": 0,
        "listen": "127.0.0.1:1",
        "peer_listen": "127.0.0.1:2",
        "peer_address": "127.0.0.1:3",
        "data_dir": "d",
        "tls": {"ca": "ca.pem", "cert": "party0.pem", "key": "party0.key"},
    }

    def identity(cert: str, key: str):
        return load_identity(parse_config({**base, "signing": {"cert": cert, "key": key}}, tmp_path))

    assert identity("party0-signing.pem", "party0-signing.key").name == "party0"
    with pytest.raises(SigningError, match="not an erasure-signing certificate"):
        identity("party0.pem", "party0.key")  # the TLS pair
    with pytest.raises(SigningError, match="names \\['party1'\\]"):
        identity("party1-signing.pem", "party1-signing.key")
    with pytest.raises(SigningError, match="does not belong"):
        identity("party0-signing.pem", "party1-signing.key")
    with pytest.raises(SigningError, match="does not exist"):
        identity("missing.pem", "party0-signing.key")
    assert load_identity(parse_config(base, tmp_path)) is None
