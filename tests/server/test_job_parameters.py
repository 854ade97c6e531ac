"""An unlearn request's parameters are parsed once (server.jobs.validation.parse_request):
the canonical JSON it returns is what party0's job table stores, what the worker's spec
carries and what party1 accepts; party1 refuses a copy that is not canonical. Real stores,
real job table, the party's own job manager and follower (no worker is started)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mpc.fixedpoint import random_ring
from proto.starfish.v1 import peer_pb2
from server.config import parse_config
from server.jobs.follower import JobFollower
from server.jobs.jobstore import JobStore
from server.jobs.manager import JobManager
from server.jobs.validation import RequestError, parse_canonical, parse_request
from server.party_state import PartyState
from server.store import Store

M, K = 8, 3  #: model size; both parties' minimum cohort
CLIENTS = dict.fromkeys(("c1", "c2", "c3", "c4"), "0" * 64)


def _party(tmp_path: Path, role: int) -> PartyState:
    """A party with two committed rounds of c1, c2, c3 (the same history on both parties)."""
    raw = {
        "role": role,
        "listen": "127.0.0.1:1",
        "peer_listen": "127.0.0.1:2",
        "peer_address": "127.0.0.1:3",
        "data_dir": f"p{role}",
        "tls": {"ca": "ca.pem", "cert": "p.pem", "key": "p.key"},
        "auth": {"clients": CLIENTS},
        "jobs": {"dealer": "127.0.0.1:4", "standby": "off"},
        "privacy": {"min_cohort": K},
    }
    cfg = parse_config(raw, tmp_path)
    store = Store(cfg.data_dir, role)
    previous = store.install_initial_model("toy", np.zeros(M, dtype=np.float32), 0.5)
    for i in (1, 2):
        members = {"c1": 3, "c2": 4, "c3": 5}
        store.open_round(i, previous, deadline=1e12, lr=0.5)
        for c, n in members.items():
            store.put_upload(i, c, n, random_ring(M), random_ring(1), random_ring(1), previous)
        store.set_round_state(i, "closed")
        store.set_membership(i, members)
        store.set_round_output(i, "toy", np.full(M, float(i), dtype=np.float32), 0)
        previous = store.commit_round(i)
    return PartyState(cfg, store)


@pytest.fixture
def party0(tmp_path: Path):
    state = _party(tmp_path, 0)
    jobs = JobStore(state.config.data_dir)
    manager = JobManager(state, jobs, peer=None, certifier=None)  # type: ignore[arg-type]
    yield manager
    manager.close()
    jobs.close()
    state.store.close()


def _spelled_out(canonical: str) -> str:
    """Every default written out, in another key order and with the buffer size's other name."""
    values = json.loads(canonical)
    values["B"] = values.pop("buffer_size")
    return json.dumps(dict(reversed(list(values.items()))), indent=2)


def test_defaults_omitted_or_spelled_out_give_one_canonical_json_and_one_job(party0) -> None:
    omitted = parse_request(["c1"], "", "", min_cohort=K)
    spelled = parse_request(["c1"], "starfish", _spelled_out(omitted.parameters_json), min_cohort=K)
    assert spelled.parameters_json == omitted.parameters_json
    stored = json.loads(omitted.parameters_json)
    assert list(stored) == sorted(stored) and stored["min_cohort"] == K and "sigma" in stored and "B" not in stored
    first = party0.submit(omitted)
    assert party0.submit(spelled).job_id == first.job_id  # the same request: the same job
    assert [j.job_id for j in party0.jobs.all()] == [first.job_id]
    assert first.parameters_json == omitted.parameters_json  # stored as parsed
    spec = party0.spec(first, 1, f"{first.job_id}.1", "127.0.0.1", 0)  # what the worker is given
    assert json.dumps(spec.parameters, sort_keys=True) == omitted.parameters_json
    assert parse_canonical(spec.targets, spec.strategy, omitted.parameters_json).params == omitted.params


@pytest.mark.parametrize(
    "text,named",
    [('{"sigma": 1.5}', "sigma must be in"), ('{"sigmaa": 0.5}', "sigmaa"), ('{"B": "two"}', "buffer_size")],
)
def test_a_bad_parameter_is_refused_at_filing_naming_it(party0, text: str, named: str) -> None:
    with pytest.raises(RequestError, match=named) as err:
        party0.submit(parse_request(["c1"], "starfish", text, party0.cfg.unlearning, min_cohort=K))
    assert err.value.kind == "invalid"
    assert party0.jobs.all() == []  # nothing filed


def test_party1_refuses_a_copy_that_is_not_canonical(tmp_path: Path) -> None:
    state = _party(tmp_path, 1)
    jobs = JobStore(state.config.data_dir)
    follower = JobFollower(state, jobs)
    canonical = parse_request(["c1"], "starfish", "", min_cohort=K).parameters_json
    below_k = json.dumps({**json.loads(canonical), "min_cohort": K - 1}, sort_keys=True)
    try:
        for text, why in (
            ("{}", "not canonical"),
            (_spelled_out(canonical), "not canonical"),
            (below_k, "below this party's minimum cohort"),
        ):
            spec = peer_pb2.JobSpec(
                job_id="j0123456789ab",
                targets=["c1"],
                strategy="starfish",
                parameters_json=text,
                base_round=2,
                base_model_hash=state.store.global_model_hash(2),
            )
            with pytest.raises(RequestError, match=why):
                follower.start_job(spec)
        assert jobs.all() == []
        party1_view = parse_canonical(["c1"], "starfish", canonical, state.config.unlearning, min_cohort=K)
        assert party1_view.parameters_json == canonical
    finally:
        follower.close()
        jobs.close()
        state.store.close()
