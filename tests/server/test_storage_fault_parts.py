"""Storage faults in the store: a write that fails (database full, no space for a blob) leaves no
half transaction and no file, raises the original error (classified as a retryable storage
fault), and the same write succeeds once there is room; the chain of global models has one
writer; the training pause survives a restart of the party's state."""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from mpc.fixedpoint import random_ring
from server.config import PartyConfig, TlsConfig
from server.party_state import PartyState
from server.storage_faults import StorageFault, classify
from server.store import ConflictError, Store

M = 37


def _store(tmp_path: Path) -> tuple[Store, str]:
    st = Store(tmp_path / "p1", 1)
    h = st.install_initial_model("toy", np.arange(M, dtype=np.float32), 0.1)
    st.open_round(1, h, deadline=1e12, lr=0.1)
    return st, h


def _aggregated(st: Store) -> None:
    st.set_membership(1, {"a": 1, "b": 1, "c": 1})
    st.set_round_output(1, "toy", np.ones(M, dtype=np.float32), peer_bytes=0)


def _fill_database(st: Store) -> None:
    """Cap the database at its current size: the next page it needs is 'database or disk is full'."""
    pages = st._db.execute("PRAGMA page_count").fetchone()[0]
    st._db.execute(f"PRAGMA max_page_count={pages}")


def _unfill_database(st: Store) -> None:
    st._db.execute("PRAGMA max_page_count=1073741823")


def test_a_full_database_at_commit_leaves_the_round_as_it_was_and_commits_later(tmp_path):
    st, _ = _store(tmp_path)
    _aggregated(st)
    _fill_database(st)
    big = [
        ("INSERT INTO members (round, client, n_samples) VALUES (?,?,?)", (99, f"x{i:05d}" + "y" * 500, 1))
        for i in range(200)
    ]
    with pytest.raises(sqlite3.OperationalError, match="database or disk is full") as raised:
        st._tx(big)  # the original error, not "cannot rollback - no transaction is active"
    assert isinstance(classify(raised.value), StorageFault) and classify(raised.value).full
    assert not st._db.in_transaction
    assert st.round_record(1).state == "aggregated" and st.round_members(99) == {}
    _unfill_database(st)
    digest = st.commit_round(1)
    assert st.round_record(1).state == "committed" and st.global_model_hash(1) == digest


def test_no_space_for_a_share_leaves_no_file_no_row_and_the_retry_is_stored(tmp_path, monkeypatch):
    st, h = _store(tmp_path)
    g, n, d = random_ring(M), random_ring(1), random_ring(1)
    real_fsync = os.fsync

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError) as raised:
        st.put_upload(1, "alice", 5, g, n, d, h)
    assert classify(raised.value).full
    assert not list(tmp_path.rglob(".tmp-*")) and not list(tmp_path.rglob("*.i64"))
    assert st.uploads(1) == {}
    monkeypatch.setattr(os, "fsync", real_fsync)
    digest, duplicate = st.put_upload(1, "alice", 5, g, n, d, h)
    assert not duplicate and np.array_equal(st.load_share(1, "alice").gradient, g)
    assert st.upload(1, "alice").grad_sha256 == digest


def test_a_failed_row_removes_its_published_share_file(tmp_path):
    """Erasure finds shares by their rows: a share file without a row would outlive an erasure."""
    st, h = _store(tmp_path)
    _fill_database(st)
    big_binding = "b" * 200_000  # the row needs new pages
    with pytest.raises(sqlite3.OperationalError, match="full"):
        st.put_upload(1, "alice", 5, random_ring(M), random_ring(1), random_ring(1), h, binding_sha256=big_binding)
    assert not list(tmp_path.rglob("*.i64")) and not list(tmp_path.rglob(".tmp-*"))


@pytest.mark.parametrize(
    "exc, full",
    [
        (sqlite3.OperationalError("database or disk is full"), True),
        (sqlite3.OperationalError("attempt to write a readonly database"), False),
        (OSError(errno.ENOSPC, "No space left on device"), True),
        (OSError(errno.EROFS, "Read-only file system"), False),
    ],
)
def test_storage_faults_are_classified(exc, full):
    assert classify(exc).full is full


@pytest.mark.parametrize(
    "exc", [sqlite3.OperationalError("no such table: x"), OSError(errno.ENOENT, "gone"), ValueError("x")]
)
def test_other_errors_are_not_storage_faults(exc):
    assert classify(exc) is None


def test_a_round_model_never_commits_beside_an_installed_one(tmp_path):
    st, _ = _store(tmp_path)
    _aggregated(st)
    with pytest.raises(ConflictError, match="training round 1 is aggregated"):
        st.install_global_model(1, "toy", np.full(M, 2.0, dtype=np.float32), 0.1)
    st.set_round_state(1, "abandoned", "ended for a job")
    job_model = st.install_global_model(1, "toy", np.full(M, 2.0, dtype=np.float32), 0.1)
    st.set_round_state(1, "aggregated")
    with pytest.raises(ConflictError, match="already"):
        st.commit_round(1)
    assert st.global_model_hash(1) == job_model and st.round_record(1).state == "aggregated"


def test_the_training_pause_survives_a_restart(tmp_path):
    st, _ = _store(tmp_path)
    tls = TlsConfig(tmp_path / "ca.pem", tmp_path / "p.pem", tmp_path / "p.key", "party1")
    cfg = PartyConfig(0, "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3", tmp_path / "p1", tls)
    state = PartyState(cfg, st)
    assert not state.training_paused.is_set()
    state.pause_training("j1")
    st.close()
    restarted = PartyState(cfg, Store(tmp_path / "p1", 1))
    assert restarted.training_paused.is_set() and restarted.store.training_pause() == "j1"
    restarted.resume_training()
    restarted.store.close()
    assert not PartyState(cfg, Store(tmp_path / "p1", 1)).training_paused.is_set()
