"""The party side of a Stage I clip session (server.stage1_clip): what it stores and when.

Real store, real processes standing in for workers that fail or lie; the whole protocol
against a real deployment is tests/privacy/test_stage1_clip.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from server.config import parse_config
from server.stage1_clip import AGGREGATE_FILE, COSTS_FILE, ClipFailed, Stage1Clipper, aggregate_digest
from server.stage1_dp import Stage1Privacy
from server.store import Store
from server.workers.process import WorkerProcess

M, LR = 8, 0.5
BASE = {
    "role": 0,
    "listen": "127.0.0.1:1",
    "peer_listen": "127.0.0.1:2",
    "peer_address": "127.0.0.1:3",
    "data_dir": "data",
    "tls": {"ca": "ca.pem", "cert": "p.pem", "key": "p.key"},
    "jobs": {"dealer": "127.0.0.1:4", "standby": "off"},
    "privacy": {"dp": True, "clip": 1.0, "min_cohort": 2},
}


class NoPeer:
    """party1 must not be asked: any call fails the test."""

    def unary(self, method, request):
        raise AssertionError(f"unexpected peer call {method}")


@pytest.fixture
def clipper(tmp_path: Path):
    cfg = parse_config(dict(BASE), tmp_path)
    store = Store(cfg.data_dir, 0)
    m0 = np.linspace(-1, 1, M).astype(np.float32)
    h0 = store.install_initial_model("toy", m0, LR)
    store.open_round(1, h0, 1e12, LR)
    store.set_membership(1, {"a": 1, "b": 1})
    yield Stage1Clipper(cfg, store, Stage1Privacy(cfg.data_dir, cfg.dp.settings)), store, m0
    store.close()


def _worker(code: int) -> WorkerProcess:
    proc = subprocess.Popen(
        [sys.executable, "-c", f"import sys; sys.exit({code})"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    return WorkerProcess(proc, lambda _msg: None)


def test_a_candidate_party1_confirmed_is_committed_without_another_session(clipper):
    clip, store, m0 = clipper
    stored = store.set_round_output(1, "toy", m0 - 1.0, peer_bytes=0)  # state "aggregated"
    assert clip.lead(1, store.round_record(1).membership_sha256, NoPeer()) == stored


def test_a_failed_worker_stores_no_candidate(clipper):
    clip, store, _ = clipper
    (clip.root / "s1").mkdir(parents=True)
    with pytest.raises(ClipFailed, match="party0 clip worker exited with code 4"):
        clip.collect(_worker(4), "s1")
    assert store.round_record(1).model_out_hash is None


def test_a_result_file_that_is_not_the_reported_one_is_refused(clipper):
    clip, store, _ = clipper
    folder = clip.root / "s2"
    folder.mkdir(parents=True)
    np.save(folder / AGGREGATE_FILE, np.ones(M), allow_pickle=False)
    (folder / COSTS_FILE).write_text(json.dumps({"stage1 clip": {"online_bytes": 10}}))
    worker = _worker(0)
    worker.result = {"kind": "result", "model_hash": aggregate_digest(np.zeros(M))}
    with pytest.raises(ClipFailed, match="does not match its reported hash"):
        clip.collect(worker, "s2")
    worker.result = {"kind": "result", "model_hash": aggregate_digest(np.ones(M))}
    aggregate, online = clip.collect(worker, "s2")
    assert np.array_equal(aggregate, np.ones(M)) and online == 10
    arch, params = clip.next_model(1, aggregate)
    assert arch == "toy" and np.array_equal(params, (store.global_model(0).params - LR).astype(np.float32))
    assert store.round_record(1).model_out_hash is None  # computing M_i stores nothing
