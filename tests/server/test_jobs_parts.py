"""Unit tests of the job runner's parts: checkpoints (exact int64 shares, no pickle,
atomic, corruption detected), the job queue, request validation against a real store,
job settings, deterministic task ids, the store-backed history's public view."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mpc.crypten_backend import CrypTenSecret
from mpc.fixedpoint import random_ring
from server.config import ConfigError, parse_config
from server.jobs.checkpoints import CheckpointDir, CheckpointError, held_checkpoint
from server.jobs.jobstore import JobStore
from server.jobs.oracle import task_id
from server.jobs.store_history import StoreHistory
from server.jobs.validation import RequestError, check_history, parse_parameters, parse_request, typed_parameters
from server.store import Store
from unlearning.starfish.driver import StarfishStrategy
from unlearning.starfish.release import PendingRelease
from unlearning.starfish.run_log import RoundEntry, StarfishLog
from unlearning.starfish.state import CurvaturePair, StarfishState

from helpers.store_rounds import commit_round

M = 7


def _state(round_index: int, deltas: np.ndarray, y: np.ndarray, held: np.ndarray) -> StarfishState:
    return StarfishState(
        clients=("c1", "c2"),
        selected=(1, 2, 3),
        method="method1",
        deltas=CrypTenSecret(torch.from_numpy(deltas), 16),
        model=torch.linspace(-1, 1, M, dtype=torch.float64),
        round=round_index,
        warmup_pairs=1,
        buffers={
            "c1": [
                CurvaturePair(
                    round=1, s=torch.ones(M, dtype=torch.float64) / M**0.5, y=CrypTenSecret(torch.from_numpy(y), 16)
                )
            ]
        },
        log=StarfishLog(rounds=[RoundEntry(1, 3, 2, "warmup", 0.5)], asked={"c1": 1}),
        pending=PendingRelease(steps=[1], blocks={1: {"c1": 0.25, "c2": 0.75}}, opaque={"c2"}),
        held=CrypTenSecret(torch.from_numpy(held), 16),
    )


def _make(a: np.ndarray, bits: int) -> CrypTenSecret:
    return CrypTenSecret(torch.from_numpy(a.copy()), bits)


def _export(secret: CrypTenSecret) -> tuple[np.ndarray, int]:
    return secret.share.numpy(), secret.bits


@settings(max_examples=20, deadline=None)
@given(st.integers(min_value=1, max_value=50))
def test_checkpoint_roundtrip_is_exact(tmp_path_factory, round_index):
    folder = CheckpointDir(tmp_path_factory.mktemp("ck"))
    deltas, y, held = random_ring(2), random_ring(M), random_ring(M)  # full-range ring elements
    digest = folder.save(_state(round_index, deltas, y, held), {"UE": {"calls": 1}}, _export)
    assert folder.rounds() == [round_index] and folder.latest() == round_index
    assert folder.digest(round_index) == digest
    state, costs = folder.load(round_index, StarfishStrategy, _make)
    assert costs == {"UE": {"calls": 1}}
    assert np.array_equal(state.deltas.share.numpy(), deltas) and state.deltas.bits == 16
    assert np.array_equal(state.buffers["c1"][0].y.share.numpy(), y)
    assert torch.equal(state.model, torch.linspace(-1, 1, M, dtype=torch.float64))
    assert state.round == round_index and state.selected == (1, 2, 3) and state.log.rounds[0].kind == "warmup"
    assert np.array_equal(state.held.share.numpy(), held)  # the release rule's held update
    assert state.pending.steps == [1] and state.pending.blocks == {1: {"c1": 0.25, "c2": 0.75}}
    assert state.log.asked == {"c1": 1}


def test_checkpoint_files_hold_no_pickle_and_corruption_is_detected(tmp_path: Path):
    folder = CheckpointDir(tmp_path)
    folder.save(_state(2, random_ring(2), random_ring(M), random_ring(M)), {}, _export)
    files = sorted(p.name for p in (tmp_path / "t000002").iterdir())
    assert set(files) == {"public.json", "p0.npy", "p1.npy", "s0.i64", "s1.i64", "s2.i64"}  # s2: held update
    for npy in (tmp_path / "t000002").glob("*.npy"):
        np.load(npy, allow_pickle=False)  # raises if an object array were stored
    share_file = tmp_path / "t000002" / "s0.i64"
    data = bytearray(share_file.read_bytes())
    data[0] ^= 1
    share_file.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="corrupt"):
        folder.load(2, StarfishStrategy, _make)


def test_public_tampering_and_partial_checkpoints(tmp_path: Path):
    folder = CheckpointDir(tmp_path)
    folder.save(_state(1, random_ring(2), random_ring(M), random_ring(M)), {}, _export)
    index = json.loads((tmp_path / "t000001" / "public.json").read_text())
    index["public"]["selected"] = [1, 2]
    (tmp_path / "t000001" / "public.json").write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match="digest"):
        folder.load(1, StarfishStrategy, _make)
    (tmp_path / ".tmp-abc").mkdir()  # a crash while writing leaves only a temporary folder
    again = CheckpointDir(tmp_path)
    assert again.rounds() == [1] and not (tmp_path / ".tmp-abc").exists()
    with pytest.raises(CheckpointError, match="no checkpoint"):
        again.load(5, StarfishStrategy, _make)


def test_held_checkpoint_is_read_from_the_job_directory(tmp_path: Path):
    """A worker killed after writing checkpoint 2 but before reporting it: the party still
    reports 2 (the attempt budget resets on it), and never less than what was reported."""
    assert held_checkpoint(tmp_path / "no-such-job") == 0
    folder = CheckpointDir(tmp_path / "job" / "checkpoints")
    folder.save(_state(2, random_ring(2), random_ring(M), random_ring(M)), {}, _export)
    assert held_checkpoint(tmp_path / "job", reported=1) == 2
    assert held_checkpoint(tmp_path / "job", reported=3) == 3
    writing = tmp_path / "job" / "checkpoints" / ".tmp-writing"  # the worker's next checkpoint
    writing.mkdir()
    (writing / "p0.npy").write_bytes(b"x")
    assert held_checkpoint(tmp_path / "job") == 2 and (writing / "p0.npy").exists()  # left alone


def test_rewriting_a_checkpoint_replaces_it_whole(tmp_path: Path):
    folder = CheckpointDir(tmp_path)
    first = folder.save(_state(2, random_ring(2), random_ring(M), random_ring(M)), {}, _export)
    second = folder.save(_state(2, random_ring(2), random_ring(M), random_ring(M)), {"again": {}}, _export)
    assert first == second and folder.rounds() == [2]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t000002"]  # the old copy is gone
    assert json.loads((tmp_path / "t000002" / "public.json").read_text())["costs"] == {"again": {}}


def test_an_unchanged_share_is_linked_and_only_the_two_newest_checkpoints_stay(tmp_path: Path):
    """A buffered pair's [ŷ] keeps its handle from round to round: the next checkpoint links
    its file instead of exporting and writing it again; a new handle (the held update) is
    written. After each save only the newest two checkpoints remain, each loading exactly."""
    folder = CheckpointDir(tmp_path)
    first = _state(1, random_ring(2), random_ring(M), random_ring(M))
    exported: list[int] = []

    def export(secret: CrypTenSecret) -> tuple[np.ndarray, int]:
        exported.append(secret.share.numel())
        return _export(secret)

    folder.save(first, {}, export)
    assert len(exported) == 3  # deltas, held, the pair's ŷ
    for t in (2, 3):
        nxt = _state(t, random_ring(2), random_ring(M), random_ring(M))
        nxt.buffers = first.buffers  # the same pair, the same [ŷ] handle
        exported.clear()
        folder.save(nxt, {}, export)
        assert len(exported) == 2  # deltas and held only
    assert folder.rounds() == [2, 3]
    index = json.loads((tmp_path / "t000003" / "public.json").read_text())
    y_file = tmp_path / "t000003" / index["secrets"]["buffer/c1/0/y"]["file"]
    assert y_file.stat().st_nlink == 2  # held by checkpoints 2 and 3, written once
    y = first.buffers["c1"][0].y.share.numpy()
    for t in (2, 3):
        state, _ = folder.load(t, StarfishStrategy, _make)
        assert np.array_equal(state.buffers["c1"][0].y.share.numpy(), y) and state.round == t
    # a later worker (a new CheckpointDir, as after a resume) writes every share afresh
    again = CheckpointDir(tmp_path)
    exported.clear()
    again.save(_state(4, random_ring(2), random_ring(M), random_ring(M)), {}, export)
    assert len(exported) == 3 and again.rounds() == [3, 4]


def test_both_parties_digest_the_same_public_state(tmp_path: Path):
    a, b = CheckpointDir(tmp_path / "p0"), CheckpointDir(tmp_path / "p1")
    # different shares (each party holds its own), same public state
    assert a.save(_state(3, random_ring(2), random_ring(M), random_ring(M)), {"x": {}}, _export) == b.save(
        _state(3, random_ring(2), random_ring(M), random_ring(M)), {"y": {}}, _export
    )


def test_job_queue_order_and_states(tmp_path: Path):
    jobs = JobStore(tmp_path)
    first = jobs.add("ja", ["c1"], "starfish", '{"sigma": 0.5}')
    second = jobs.add("jb", ["c2"], "starfish", "{}")
    assert jobs.add("ja", ["c1"], "starfish", '{"sigma": 0.5}') == first  # idempotent
    with pytest.raises(ValueError, match="other parameters"):
        jobs.add("ja", ["c1"], "starfish", '{"sigma": 0.6}')
    assert jobs.next_job().job_id == "ja"
    jobs.update("jb", state="running")
    assert jobs.next_job().job_id == "jb"  # a running job (after a restart) comes first
    jobs.finish("jb", "succeeded", model_hash="h")
    assert jobs.next_job().job_id == "ja" and jobs.get("jb").progress == 1.0
    with pytest.raises(ValueError, match="final"):
        jobs.finish("ja", "running")
    with pytest.raises(KeyError):
        jobs.update("ja", nonsense=1)
    jobs.close()
    reopened = JobStore(tmp_path)
    assert [j.job_id for j in reopened.all()] == ["ja", "jb"] and second.seq == 2


def _history_store(tmp_path: Path) -> Store:
    """Two committed rounds: c1, c2 in both, c3 only in round 2, c4 registered but never trained."""
    store = Store(tmp_path / "p0", 0)
    store.install_initial_model("toy", np.zeros(M, dtype=np.float32), 0.5)
    for i, members in ((1, {"c1": 3, "c2": 4}), (2, {"c1": 3, "c2": 4, "c3": 5})):
        commit_round(store, i, members, M)
    return store


KNOWN = {"c1", "c2", "c3", "c4"}


@pytest.mark.parametrize(
    "targets,params,kind,message",
    [
        (["zz"], {}, "not_found", "unknown client"),
        (["c4"], {}, "precondition", "took part in no stored round"),
        (["c1", "c2", "c3"], {}, "precondition", "no remaining client"),
        ([], {}, "invalid", "no target"),
        (["c1"], {"sigma": 1.5}, "invalid", "sigma"),
        (["c1"], {"B": 0}, "invalid", "buffer_size"),
    ],
)
def test_request_validation(tmp_path: Path, targets, params, kind, message):
    store = _history_store(tmp_path)
    with pytest.raises(RequestError, match=message) as err:
        check_history(store, KNOWN, parse_request(targets, "starfish", json.dumps(params)).targets)
    assert err.value.kind == kind
    assert parse_request(["c3"], "", "").strategy == "starfish"
    check_history(store, KNOWN, ["c3"])


def test_erased_target_and_history_view(tmp_path: Path):
    store = _history_store(tmp_path)
    store.erase_client("c3")
    with pytest.raises(RequestError, match="already erased"):
        check_history(store, KNOWN, ["c3"])
    history = StoreHistory(store, 2)
    assert history.num_rounds == 2 and history.all_clients() == ["c1", "c2"]  # erased c3 left out
    assert history.round_info(2).n_samples == {"c1": 3, "c2": 4} and history.round_info(2).lr == 0.5
    assert torch.equal(history.model(2), torch.full((M,), 2.0))
    with pytest.raises(IndexError):
        history.model(3)
    # an unlearned model installed as M_3 has no members and continues the chain
    store.install_global_model(3, "toy", np.ones(M, dtype=np.float32), 0.5)
    assert StoreHistory(store, 3).round_info(3).clients == ()


def test_parameters_and_settings_are_checked(tmp_path: Path):
    assert parse_parameters("") == {} and parse_parameters('{"sigma": 0.5}') == {"sigma": 0.5}
    for bad, message in (("[1]", "JSON object"), ("{", "not valid JSON")):
        with pytest.raises(RequestError, match=message):
            parse_parameters(bad)
    base = {
        "role": 0,
        "listen": "a:1",
        "peer_listen": "a:2",
        "peer_address": "a:3",
        "data_dir": "d",
        "tls": {"ca": "ca.pem", "cert": "c.pem", "key": "k.pem"},
    }
    assert parse_config({**base, "jobs": {"task_timeout_s": 5.0}}, tmp_path).jobs.task_timeout_s == 5.0
    for jobs, message in (
        ({"dealer": "party0"}, "dealer must be 'host:port'"),
        ({"dealer": "spawn"}, "'spawn' is gone"),
        ({"mpc_host": "0.0.0.0"}, "mpc_advertise"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"task_timeout_s": 0}, "task_timeout_s"),
        ({"standby": "maybe"}, "standby"),
        ({"surprise": 1}, "unknown key"),
    ):
        with pytest.raises(ConfigError, match=message):
            parse_config({**base, "jobs": jobs}, tmp_path)


def test_task_ids_are_deterministic_and_file_safe():
    a = task_id("j0123456789ab", 3, "correction", "ab" * 32, 1_790_000_000_000, "client.7")
    assert a == task_id("j0123456789ab", 3, "correction", "ab" * 32, 1_790_000_000_000, "client.7")
    assert a != task_id("j0123456789ab", 3, "correction", "cd" * 32, 1_790_000_000_000, "client.7")
    assert a != task_id("j0123456789ab", 3, "correction", "ab" * 32, 1_790_000_000_001, "client.7")  # a re-ask
    assert "/" not in a and a.isascii()


def test_job_strategies():
    assert typed_parameters("", {})[0] == "starfish"
    assert typed_parameters("random", {"seed": 3, "sigma": 0.5})[0] == "random"
    for name, params, message in (
        ("random", {"seed": "x"}, "seed"),
        ("starfish", {"seed": 3}, "unknown parameter"),
        ("federaser", {}, "not available as a 2PC job"),
        ("nope", {}, "unknown"),
    ):
        with pytest.raises(RequestError, match=message):
            typed_parameters(name, params)
