"""Durable store: atomic blobs, idempotent uploads, bindings, conflicts, closed rounds, sample budget,
exclusions, reopen and schema upgrade, erase."""

from pathlib import Path

import numpy as np
import pytest

from mpc.fixedpoint import random_ring
from proto.wire import model_hash
from server.store import ConflictError, RoundClosedError, SampleBudgetError, Store, StoreError

M = 37


def _store(tmp_path: Path) -> tuple[Store, str]:
    st = Store(tmp_path / "p0", 0)
    h = st.install_initial_model("toy", np.arange(M, dtype=np.float32), 0.1)
    st.open_round(1, h, deadline=1e12, lr=0.1)
    return st, h


def _one() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return random_ring(M), random_ring(1), random_ring(1)


def test_upload_roundtrip_and_idempotent_retry(tmp_path: Path):
    st, h = _store(tmp_path)
    g, n, d = _one()
    digest, dup = st.put_upload(1, "alice", 5, g, n, d, h)
    assert not dup
    again, dup2 = st.put_upload(1, "alice", 5, g.copy(), n, d, h)
    assert dup2 and again == digest
    b = st.load_share(1, "alice")
    assert np.array_equal(b.gradient, g) and np.array_equal(b.norm, n) and np.array_equal(b.delta, d)
    assert b.n_samples == 5
    assert not list(tmp_path.rglob(".tmp-*"))


@pytest.mark.parametrize("change", ["gradient", "norm", "n_samples"])
def test_conflicting_second_upload_is_rejected_and_loses_nothing(tmp_path: Path, change: str):
    st, h = _store(tmp_path)
    g, n, d = _one()
    st.put_upload(1, "alice", 5, g, n, d, h)
    g2, n2, k = (
        (random_ring(M), n, 5) if change == "gradient" else (g, random_ring(1), 5) if change == "norm" else (g, n, 6)
    )
    with pytest.raises(ConflictError, match="cannot be replaced"):
        st.put_upload(1, "alice", k, g2, n2, d, h)
    assert np.array_equal(st.load_share(1, "alice").gradient, g)


def test_upload_to_closed_round_is_refused(tmp_path: Path):
    st, h = _store(tmp_path)
    st.set_round_state(1, "closed")
    with pytest.raises(RoundClosedError, match="not open"):
        st.put_upload(1, "bob", 1, *_one(), h)
    assert st.uploads(1) == {}
    assert not list((tmp_path / "p0" / "shares").rglob("*.i64"))


def test_state_survives_reopen_and_readonly_view(tmp_path: Path):
    st, h = _store(tmp_path)
    g, n, d = _one()
    st.put_upload(1, "alice", 3, g, n, d, h)
    st.register("alice")
    st.close()
    ro = Store(tmp_path / "p0", 0, readonly=True)
    assert ro.registered() == ["alice"]
    assert ro.is_registered("alice") and not ro.is_registered("bob")
    assert np.array_equal(ro.load_share(1, "alice").gradient, g)
    assert ro.global_model(0).hash == h and ro.global_model(0).hash == model_hash("toy", np.arange(M, dtype=np.float32))


def test_corrupt_share_file_is_detected(tmp_path: Path):
    st, h = _store(tmp_path)
    st.put_upload(1, "alice", 3, *_one(), h)
    path = next((tmp_path / "p0" / "shares").rglob("alice.i64"))
    data = bytearray(path.read_bytes())
    data[0] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(StoreError, match="corrupt"):
        st.load_share(1, "alice")


def test_scalar_shares_are_read_from_the_row_without_the_gradient_share(tmp_path: Path):
    """[‖g‖] and [δ] come from the upload's row: equal to the bundle's, and readable even when
    the gradient's share file is gone (it is not touched); a missing upload is refused."""
    st, h = _store(tmp_path)
    g, n, d = _one()
    st.put_upload(1, "alice", 3, g, n, d, h)
    norm, delta = st.load_scalar_shares(1, "alice")
    assert np.array_equal(norm, n) and np.array_equal(delta, d) and norm.dtype == delta.dtype == np.int64
    next((tmp_path / "p0" / "shares").rglob("alice.i64")).unlink()
    assert np.array_equal(st.load_scalar_shares(1, "alice")[1], d)
    with pytest.raises(StoreError, match="missing"):
        st.load_share(1, "alice")
    with pytest.raises(StoreError, match="no stored upload"):
        st.load_scalar_shares(1, "bob")


def test_a_verified_hash_is_stored_as_given_and_checked_on_load(tmp_path: Path):
    """The upload path hands over the hash it already checked; the store keeps it without
    hashing again, and a wrong one is still caught when the share is read."""
    from mpc.fixedpoint import to_wire
    from proto.wire import sha256_hex

    st, h = _store(tmp_path)
    g, n, d = _one()
    right = sha256_hex(to_wire(g))
    assert st.put_upload(1, "alice", 3, g, n, d, h, verified_sha256=right) == (right, False)
    assert np.array_equal(st.load_share(1, "alice").gradient, g)
    st.put_upload(1, "bob", 3, g, n, d, h, verified_sha256="0" * 64)
    with pytest.raises(StoreError, match="corrupt"):
        st.load_share(1, "bob")


def test_open_round_checks_previous_model(tmp_path: Path):
    st, h = _store(tmp_path)
    with pytest.raises(StoreError, match="cannot open round 2"):
        st.open_round(2, h, 1e12, 0.1)  # M_1 does not exist yet
    with pytest.raises(ConflictError):
        st.open_round(1, "0" * 64, 1e12, 0.1)


def test_round_commit_and_read_api(tmp_path: Path):
    st, h = _store(tmp_path)
    for c in ("a", "b"):
        st.put_upload(1, c, 2, *_one(), h)
    st.set_round_state(1, "closed")
    st.set_membership(1, {"a": 2, "b": 2})
    with pytest.raises(ConflictError):
        st.set_membership(1, {"a": 2})
    new = np.ones(M, dtype=np.float32)
    digest = st.set_round_output(1, "toy", new, peer_bytes=16)
    assert st.commit_round(1) == digest and st.commit_round(1) == digest
    assert st.committed_rounds() == [1] and st.latest_committed() == 1
    assert st.round_members(1) == {"a": 2, "b": 2}
    assert np.array_equal(st.global_model(1).params, new)


def test_erase_returns_receipt_and_deletes_files(tmp_path: Path):
    st, h = _store(tmp_path)
    g, n, d = _one()
    digest, _ = st.put_upload(1, "alice", 3, g, n, d, h)
    st.put_upload(1, "bob", 3, *_one(), h)
    st.register("alice")
    assert st.is_registered("alice")
    receipt = st.erase_client("alice")
    assert not st.is_registered("alice")  # an erased client is no longer registered
    assert receipt.rounds == [1] and receipt.files_deleted == 1 and receipt.bytes_deleted == 8 * M
    assert receipt.content_sha256 == [digest] and receipt.rows_deleted == 1
    assert not (tmp_path / "p0" / "shares" / "r000001" / "alice.i64").exists()
    assert set(st.uploads(1)) == {"bob"} and st.is_erased("alice")
    with pytest.raises(StoreError):
        st.load_share(1, "alice")


def test_erasure_receipt_is_kept_and_a_repeated_erase_returns_it(tmp_path: Path):
    """A retry of an erasure (e.g. the reply was lost) returns the receipt of what was
    deleted, also after the store was reopened: the receipt is durable with the deletion."""
    st, h = _store(tmp_path)
    st.put_upload(1, "alice", 3, *_one(), h)
    assert st.erasure_receipt("alice") is None
    first = st.erase_client("alice")
    st.close()
    again = Store(tmp_path / "p0", 0)
    assert again.erasure_receipt("alice") == first
    assert again.erase_client("alice") == first and first.rows_deleted == 1 and first.rounds == [1]


def test_seed_compressed_share_is_expanded_on_load(tmp_path: Path):
    from mpc.masks import expand_mask, new_seed

    st, h = _store(tmp_path)
    seed = new_seed()
    n, d = random_ring(1), random_ring(1)
    digest, _ = st.put_upload(1, "alice", 4, None, n, d, h, mask_seed=seed, num_params=M)
    assert st.put_upload(1, "alice", 4, None, n, d, h, mask_seed=seed, num_params=M) == (digest, True)
    with pytest.raises(ConflictError):
        st.put_upload(1, "alice", 4, None, n, d, h, mask_seed=new_seed(), num_params=M)
    b = st.load_share(1, "alice")
    assert np.array_equal(b.gradient, expand_mask(seed, M)) and b.gradient.size == M
    assert not list((tmp_path / "p0" / "shares").rglob("*.i64"))  # 33 bytes in the row, no blob
    assert st.erase_client("alice").rows_deleted == 1


def test_stored_retired_shake_seed_is_refused_on_load(tmp_path: Path):
    """A row holding an untagged 32-byte seed (the retired SHAKE-256 form) is never expanded
    with another generator: loading it names the problem."""
    st, h = _store(tmp_path)
    st.put_upload(1, "alice", 4, None, random_ring(1), random_ring(1), h, mask_seed=bytes(32), num_params=M)
    with pytest.raises(StoreError, match="retired untagged SHAKE-256"):
        st.load_share(1, "alice")


def test_current_round_never_reports_a_committed_round_while_rounds_commit(tmp_path: Path):
    """GetRound reads the open round while the coordinator commits: the snapshot it gets
    must be one consistent row, never a round that has committed meanwhile."""
    import threading

    st, h = _store(tmp_path)
    seen: list[str] = []
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            rec = st.current_round()
            if rec is not None:
                seen.append(rec.state)

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        for i in range(1, 41):
            if i > 1:
                st.open_round(i, st.global_model_hash(i - 1), deadline=1e12, lr=0.1)
            st.set_round_state(i, "closed")
            st.set_membership(i, {})
            st.set_round_output(i, "toy", np.full(M, i, dtype=np.float32), peer_bytes=0)
            st.commit_round(i)
    finally:
        done.set()
        poller.join()
    assert seen, "the poller never saw an open round"
    assert "committed" not in seen


def test_erased_seed_and_scalar_shares_leave_no_bytes_in_the_database_files(tmp_path: Path):
    """Erasure must not leave a seed-compressed share (33 bytes in a row) readable in the
    SQLite file or its write-ahead log."""
    from mpc.masks import new_seed

    st, h = _store(tmp_path)
    seed = new_seed()
    st.put_upload(1, "alice", 4, None, random_ring(1), random_ring(1), h, mask_seed=seed, num_params=M)
    st.put_upload(1, "bob", 4, *_one(), h)
    st.erase_client("alice")
    db_files = [p for p in (tmp_path / "p0").iterdir() if p.name.startswith("meta.sqlite")]
    assert db_files
    for path in db_files:
        assert seed not in path.read_bytes(), f"erased seed still readable in {path.name}"


def test_binding_is_part_of_an_upload(tmp_path: Path):
    """The same bytes under another binding are another sharing's half: refused, not a duplicate."""
    st, h = _store(tmp_path)
    g, n, d = _one()
    digest, _ = st.put_upload(1, "alice", 5, g, n, d, h, binding_sha256="b" * 64)
    assert st.put_upload(1, "alice", 5, g, n, d, h, binding_sha256="b" * 64) == (digest, True)
    with pytest.raises(ConflictError, match="cannot be replaced"):
        st.put_upload(1, "alice", 5, g, n, d, h, binding_sha256="c" * 64)
    assert st.upload(1, "alice").binding_sha256 == "b" * 64 and st.upload(1, "bob") is None


def test_a_held_upload_is_answered_after_the_close(tmp_path: Path):
    st, h = _store(tmp_path)
    g, n, d = _one()
    digest, _ = st.put_upload(1, "alice", 5, g, n, d, h, binding_sha256="b" * 64)
    st.set_round_state(1, "closed")
    assert st.put_upload(1, "alice", 5, g, n, d, h, binding_sha256="b" * 64) == (digest, True)  # a retry
    with pytest.raises(ConflictError):
        st.put_upload(1, "alice", 5, *_one(), h, binding_sha256="b" * 64)
    with pytest.raises(RoundClosedError):
        st.put_upload(1, "bob", 5, *_one(), h)


def test_sample_budget_refuses_the_upload_that_would_exceed_it(tmp_path: Path):
    st, h = _store(tmp_path)
    st.put_upload(1, "a", 60, *_one(), h, sample_budget=100)
    st.put_upload(1, "b", 40, *_one(), h, sample_budget=100)  # exactly at the budget
    with pytest.raises(SampleBudgetError, match="Σ n_j = 100; n_j = 1 more would exceed the round's sample budget 100"):
        st.put_upload(1, "c", 1, *_one(), h, sample_budget=100)
    assert set(st.uploads(1)) == {"a", "b"}
    assert not (tmp_path / "p0" / "shares" / "r000001" / "c.i64").exists()


def test_exclusions_are_stored_with_the_membership(tmp_path: Path):
    st, h = _store(tmp_path)
    st.put_upload(1, "a", 2, *_one(), h)
    st.set_round_state(1, "closed")
    st.set_membership(1, {"a": 2}, {"b": "only party1 holds an upload"})
    st.set_membership(1, {"a": 2}, {"b": "only party1 holds an upload"})  # idempotent
    assert st.exclusions(1) == {"b": "only party1 holds an upload"} and st.exclusions(2) == {}


def test_store_of_an_earlier_version_gains_the_binding_column(tmp_path: Path):
    import sqlite3

    root = tmp_path / "old"
    root.mkdir()
    db = sqlite3.connect(root / "meta.sqlite")
    db.execute(
        "CREATE TABLE uploads (round INTEGER NOT NULL, client TEXT NOT NULL, n_samples INTEGER NOT NULL, "
        "num_params INTEGER NOT NULL, grad_sha256 TEXT NOT NULL, norm_share INTEGER NOT NULL, "
        "delta_share INTEGER NOT NULL, model_hash TEXT NOT NULL, received REAL NOT NULL, mask_seed BLOB, "
        "PRIMARY KEY (round, client))"
    )
    db.execute("INSERT INTO uploads VALUES (1, 'alice', 3, 4, 'x', 0, 0, 'h', 0, NULL)")
    db.commit()
    db.close()
    st = Store(root, 0)
    assert st.upload(1, "alice").binding_sha256 == ""


def test_a_model_is_read_and_checked_once_then_served_read_only_and_its_header_from_the_database(tmp_path: Path):
    st, h = _store(tmp_path)
    assert st.global_model_header(0) == ("toy", M, h, pytest.approx(0.1))
    path = tmp_path / "p0" / "models" / f"{h}.f32"
    path.write_bytes(b"\0" * path.stat().st_size)  # corrupt before the first read: detected
    with pytest.raises(StoreError, match="corrupt"):
        st.model_by_hash(h)
    path.write_bytes(np.arange(M, dtype="<f4").tobytes())
    first = st.global_model(0)
    assert np.array_equal(first.params, np.arange(M, dtype=np.float32)) and first.lr == pytest.approx(0.1)
    with pytest.raises(ValueError, match="read-only"):
        first.params[0] = 1.0  # the cached array is shared by every reader
    path.unlink()  # later reads come from memory; the header never needs the file
    assert np.array_equal(st.global_model(0).params, first.params)
    assert st.global_model_header(0)[2] == h
    with pytest.raises(StoreError, match="no committed global model"):
        st.global_model_header(5)


def test_reopening_removes_stale_temp_files_but_not_a_job_checkpoint_being_written(tmp_path: Path):
    """A party killed mid-write restarts: its temp files go, a job's temp checkpoint folder
    (the job's own to clear when it resumes) stays, and the store opens."""
    Store(tmp_path, 0).close()
    stale = tmp_path / "shares" / ".tmp-0123456789abcdef"
    stale.write_bytes(b"half a share")
    folder = tmp_path / "jobs" / "j0" / "checkpoints" / ".tmp-fedcba9876543210"
    folder.mkdir(parents=True)
    (folder / "public.json").write_text("{}")
    Store(tmp_path, 0).close()
    assert not stale.exists()
    assert (folder / "public.json").exists()
