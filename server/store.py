"""A party's durable store: SQLite (WAL, synchronous=FULL) for metadata, files for durable.

Layout under the data dir::

    meta.sqlite                       rounds, membership, uploads, models, clients, tasks
    models/<hash>.f32                 public models, content-addressed (float32 LE)
    shares/r<round>/<client>.i64      this party's share of a client's gradient (int64 LE)
    tasks/<task_id>.i64               this party's share of a task answer

A model file never changes once written (its name is its hash): the last MODEL_CACHE
models read are kept in memory, checked against their hash on the first read and handed
out read-only, so the 20 downloads of M_{i−1} in a round read and hash the file once.

A share sent seed-compressed (mpc.masks) is kept as its tagged 33-byte seed in the row
and expanded on load; it has no file.

A share blob is written to a temp file, fsynced and renamed before its row is
committed, and a call returns only after the commit: nothing is acknowledged before
it is durable. The shares of ‖g‖ and δ are 8-byte values kept in the upload row.

The read API (`committed_rounds`, `round_members`, `load_share`, `global_model`,
`load_task_share`) is what the Stage II job runner uses; `erase_client` deletes a
client's shares and returns a receipt.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from mpc import durable
from mpc.masks import MaskSeedError, expand_mask
from proto.wire import model_from_bytes, model_hash, model_to_bytes, sha256_hex
from server.config import CLIENT_ID_RE
from server.file_modes import private_dir, private_sqlite_path

SCHEMA = """
CREATE TABLE IF NOT EXISTS models (
  hash TEXT PRIMARY KEY, arch TEXT NOT NULL, num_params INTEGER NOT NULL, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS global_models (
  round INTEGER PRIMARY KEY, hash TEXT NOT NULL REFERENCES models(hash), lr REAL NOT NULL,
  committed REAL NOT NULL);
CREATE TABLE IF NOT EXISTS rounds (
  round INTEGER PRIMARY KEY, state TEXT NOT NULL, model_in_hash TEXT NOT NULL,
  deadline REAL NOT NULL, lr REAL NOT NULL, opened REAL NOT NULL,
  membership_sha256 TEXT, model_out_hash TEXT, peer_bytes INTEGER NOT NULL DEFAULT 0,
  error TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS members (
  round INTEGER NOT NULL, client TEXT NOT NULL, n_samples INTEGER NOT NULL,
  PRIMARY KEY (round, client));
CREATE TABLE IF NOT EXISTS uploads (
  round INTEGER NOT NULL, client TEXT NOT NULL, n_samples INTEGER NOT NULL,
  num_params INTEGER NOT NULL, grad_sha256 TEXT NOT NULL, norm_share INTEGER NOT NULL,
  delta_share INTEGER NOT NULL, model_hash TEXT NOT NULL, received REAL NOT NULL, mask_seed BLOB,
  binding_sha256 TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (round, client));
CREATE TABLE IF NOT EXISTS exclusions (
  round INTEGER NOT NULL, client TEXT NOT NULL, reason TEXT NOT NULL,
  PRIMARY KEY (round, client));
CREATE TABLE IF NOT EXISTS close_when (
  round INTEGER NOT NULL, client TEXT NOT NULL, PRIMARY KEY (round, client));
CREATE TABLE IF NOT EXISTS close_requests (round INTEGER PRIMARY KEY, requested REAL NOT NULL);
CREATE TABLE IF NOT EXISTS clients (
  client TEXT PRIMARY KEY, registered REAL, erased REAL);
CREATE TABLE IF NOT EXISTS tasks (
  task_id TEXT PRIMARY KEY, client TEXT NOT NULL, job_id TEXT NOT NULL, kind INTEGER NOT NULL,
  unlearning_round INTEGER NOT NULL, original_round INTEGER NOT NULL, model_hash TEXT NOT NULL,
  deadline REAL NOT NULL, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS erasures (
  client TEXT PRIMARY KEY, receipt TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS training_pause (
  id INTEGER PRIMARY KEY CHECK (id = 0), job_id TEXT NOT NULL, since REAL NOT NULL);
CREATE TABLE IF NOT EXISTS task_uploads (
  task_id TEXT PRIMARY KEY, client TEXT NOT NULL, n_samples INTEGER NOT NULL,
  num_params INTEGER NOT NULL, grad_sha256 TEXT NOT NULL, norm_share INTEGER NOT NULL,
  delta_share INTEGER NOT NULL, received REAL NOT NULL, mask_seed BLOB,
  binding_sha256 TEXT NOT NULL DEFAULT '');
"""
log = logging.getLogger(__name__)
MODEL_CACHE = 2
"""Models kept in memory after their first read (M_{i−1} and M_i: what a round serves and uses)."""
#: columns added after a table was first created: (table, column, definition)
ADDED_COLUMNS = (
    ("uploads", "binding_sha256", "TEXT NOT NULL DEFAULT ''"),
    ("task_uploads", "binding_sha256", "TEXT NOT NULL DEFAULT ''"),
    ("members", "weight", "INTEGER"),  #: the capped aggregation weight w_j (NULL: n_j, a store made before the cap)
    ("members", "principal", "TEXT NOT NULL DEFAULT ''"),  #: the client's enrolled principal ('' : itself)
)


class StoreError(Exception):
    """A store operation cannot be carried out (unknown round, missing model, ...)."""


class RoundClosedError(StoreError):
    """An upload arrived for a round that is not (or no longer) open."""


class ConflictError(StoreError):
    """A second, different upload for the same (client, round) or task."""


class SampleBudgetError(StoreError):
    """An upload's n_j would take the round's Σ n_j past its sample budget (server.headroom)."""


@dataclass(frozen=True)
class PublicModel:
    arch: str
    params: np.ndarray  #: flat float32
    hash: str
    lr: float = 0.0


@dataclass(frozen=True)
class RoundRecord:
    round: int
    state: str  #: open | closed | agreed | aggregated | committed | failed
    model_in_hash: str
    deadline: float
    lr: float
    opened: float
    membership_sha256: str | None
    model_out_hash: str | None
    peer_bytes: int
    error: str


@dataclass(frozen=True)
class UploadRecord:
    client: str
    n_samples: int
    grad_sha256: str
    num_params: int
    binding_sha256: str = ""


@dataclass(frozen=True)
class ShareBundle:
    """One party's shares of one client's upload: [g] (m,), [‖g‖] (1,), [δ] (1,), public n_j."""

    gradient: np.ndarray
    norm: np.ndarray
    delta: np.ndarray
    n_samples: int


@dataclass(frozen=True)
class TaskRecord:
    task_id: str
    client: str
    job_id: str
    kind: int
    unlearning_round: int
    original_round: int
    model_hash: str
    deadline: float


@dataclass
class EraseReceiptData:
    party: int
    client: str
    rounds: list[int] = field(default_factory=list)
    files_deleted: int = 0
    bytes_deleted: int = 0
    rows_deleted: int = 0
    erased_at: float = 0.0
    content_sha256: list[str] = field(default_factory=list)


def membership_digest(members: dict[str, int], round_index: int) -> str:
    """Hash of a round's agreed membership S with weights: both parties must compute the same."""
    text = f"round={round_index};" + ";".join(f"{c}={members[c]}" for c in sorted(members))
    return sha256_hex(text.encode("utf-8"))


def _share_payload(
    gradient_share: np.ndarray | None, mask_seed: bytes | None, verified_sha256: str | None
) -> tuple[bytes | memoryview | None, str]:
    """(bytes to write, content hash) of a share: a seed-compressed one has no file and the
    seed's hash; a full one is written as little-endian int64 without another copy. A hash
    the caller already checked against these bytes (`verified_sha256`) is not recomputed;
    every load checks the bytes against the stored hash again."""
    if mask_seed is not None:
        return None, sha256_hex(mask_seed)
    arr = np.asarray(gradient_share)
    if arr.dtype == np.dtype("<i8") and arr.flags.c_contiguous:
        data: bytes | memoryview = memoryview(arr).cast("B")
    else:
        data = np.ascontiguousarray(arr, dtype="<i8").tobytes()
    return data, verified_sha256 or sha256_hex(data)


class Store:
    """Thread-safe durable store of one party (one SQLite connection behind a lock)."""

    def __init__(self, data_dir: Path, party: int, readonly: bool = False):
        """Open (creating when needed) a party's store. `readonly=True` opens an existing
        store for reading beside the running party (e.g. from a job worker)."""
        self.root = Path(data_dir)
        self.party = party
        self._lock = threading.RLock()
        self._models: dict[str, PublicModel] = {}  #: verified models by hash, newest last (MODEL_CACHE)
        if readonly:
            if not (self.root / "meta.sqlite").exists():
                raise StoreError(f"{self.root} holds no store")
            self._db = sqlite3.connect(
                f"file:{self.root / 'meta.sqlite'}?mode=ro", uri=True, check_same_thread=False, isolation_level=None
            )
            return
        for sub in ("models", "shares", "tasks"):
            private_dir(self.root / sub)
        durable.remove_stale_temps(self.root)
        db_path = private_sqlite_path(self.root / "meta.sqlite")
        self._db = sqlite3.connect(db_path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA secure_delete=ON")  # erased rows (seeds, scalar shares) are zeroed
        self._db.executescript(SCHEMA)
        self._add_missing_columns()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _add_missing_columns(self) -> None:
        """Bring a store made by an earlier version up to the current schema (new columns only)."""
        for table, column, definition in ADDED_COLUMNS:
            existing = {row[1] for row in self._db.execute(f"PRAGMA table_info({table})")}
            if column not in existing:
                self._db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {definition}")

    # -- helpers -------------------------------------------------------------------------
    def _query(self, sql: str, args: tuple = ()) -> list[tuple]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    def _tx(self, statements: list[tuple[str, tuple]]) -> None:
        """Run `statements` as one transaction: all of them or none. A failed statement or
        COMMIT (a full or read-only disk: server.storage_faults) rolls back what SQLite has not
        rolled back itself, and the original error is raised."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for sql, args in statements:
                    self._db.execute(sql, args)
                self._db.execute("COMMIT")
            except BaseException:
                self._rollback()
                raise

    def _rollback(self) -> None:
        """End a failed transaction; SQLite may already have rolled it back (SQLITE_FULL at COMMIT)."""
        if not self._db.in_transaction:
            return
        try:
            self._db.execute("ROLLBACK")
        except sqlite3.OperationalError as exc:  # the original error is the one to report
            log.warning("rollback after a failed write: %s", exc)

    def _share_path(self, round_index: int, client: str) -> Path:
        if not CLIENT_ID_RE.match(client):
            raise StoreError(f"invalid client id {client!r}")
        return self.root / "shares" / f"r{round_index:06d}" / f"{client}.i64"

    # -- public models -------------------------------------------------------------------
    def put_model(self, arch: str, params: np.ndarray) -> str:
        """Store a public model content-addressed; returns its hash (idempotent)."""
        flat = np.ascontiguousarray(params, dtype=np.float32).reshape(-1)
        digest = model_hash(arch, flat)
        path = self.root / "models" / f"{digest}.f32"
        if not self._query("SELECT 1 FROM models WHERE hash=?", (digest,)):
            durable.atomic_write(path, model_to_bytes(flat))
            self._tx([("INSERT OR IGNORE INTO models VALUES (?,?,?,?)", (digest, arch, int(flat.size), time.time()))])
        return digest

    def model_by_hash(self, digest: str) -> PublicModel:
        """A stored model, read and checked against its hash once; the last MODEL_CACHE models
        read stay in memory with read-only params (a model file never changes: content-addressed),
        so the clients' downloads of M_{i−1} in a round read and hash the file once."""
        cached = self._models.get(digest)
        if cached is not None:
            return cached
        rows = self._query("SELECT arch, num_params FROM models WHERE hash=?", (digest,))
        if not rows:
            raise StoreError(f"no model with hash {digest[:12]}…")
        arch, n = rows[0]
        params = model_from_bytes((self.root / "models" / f"{digest}.f32").read_bytes(), n)
        if model_hash(arch, params) != digest:
            raise StoreError(f"model file {digest[:12]}… is corrupt (hash mismatch)")
        params.flags.writeable = False
        model = PublicModel(arch, params, digest)
        with self._lock:
            self._models[digest] = model
            while len(self._models) > MODEL_CACHE:
                self._models.pop(next(iter(self._models)))
        return model

    def model_size(self, digest: str) -> int:
        """Number of parameters of a stored model (without reading it)."""
        rows = self._query("SELECT num_params FROM models WHERE hash=?", (digest,))
        if not rows:
            raise StoreError(f"no model with hash {digest[:12]}…")
        return int(rows[0][0])

    def global_model(self, round_index: int) -> PublicModel:
        """Public global model M_i (0 = initial model)."""
        rows = self._query("SELECT hash, lr FROM global_models WHERE round=?", (round_index,))
        if not rows:
            raise StoreError(f"no committed global model for round {round_index}")
        m = self.model_by_hash(rows[0][0])
        return PublicModel(m.arch, m.params, m.hash, rows[0][1])

    def global_model_header(self, round_index: int) -> tuple[str, int, str, float]:
        """(arch, number of parameters, hash, lr) of M_i without reading its parameters."""
        rows = self._query(
            "SELECT m.arch, m.num_params, g.hash, g.lr FROM global_models g JOIN models m ON m.hash = g.hash "
            "WHERE g.round=?",
            (round_index,),
        )
        if not rows:
            raise StoreError(f"no committed global model for round {round_index}")
        arch, n, digest, lr = rows[0]
        return arch, int(n), digest, float(lr)

    def global_model_hash(self, round_index: int) -> str | None:
        rows = self._query("SELECT hash FROM global_models WHERE round=?", (round_index,))
        return rows[0][0] if rows else None

    def commit_times(self) -> dict[int, float]:
        """When each global model M_i was committed (unix time), by i."""
        return {int(r): float(t) for r, t in self._query("SELECT round, committed FROM global_models")}

    def latest_committed(self) -> int:
        """T: index of the newest committed global model; −1 before M_0 is installed."""
        rows = self._query("SELECT MAX(round) FROM global_models")
        return -1 if rows[0][0] is None else int(rows[0][0])

    def install_initial_model(self, arch: str, params: np.ndarray, lr: float) -> str:
        """Commit M_0 (once); a second call must carry the same model."""
        digest = self.put_model(arch, params)
        existing = self.global_model_hash(0)
        if existing is not None:
            if existing != digest:
                raise ConflictError(f"an initial model {existing[:12]}… is already installed")
            return digest
        self._tx([("INSERT INTO global_models VALUES (0,?,?,?)", (digest, float(lr), time.time()))])
        return digest

    def install_global_model(self, round_index: int, arch: str, params: np.ndarray, lr: float) -> str:
        """Commit a model made outside a training round (an unlearned model) as M_i, i = T + 1.

        Training then continues from it. Idempotent for the same model; refuses (ConflictError)
        another one, a chain that moved past M_{i−1}, and a training round i still in progress
        (the job waits for it: the chain has one writer at a time, see `commit_round`).
        """
        digest = self.put_model(arch, params)
        with self._lock:
            existing = self.global_model_hash(round_index)
            if existing is not None:
                if existing != digest:
                    raise ConflictError(f"global model {round_index} is already {existing[:12]}…")
                return digest
            if self.latest_committed() != round_index - 1:
                raise ConflictError(
                    f"cannot install M_{round_index}: the newest global model is M_{self.latest_committed()}"
                )
            busy = self.round_record(round_index)
            if busy is not None and busy.state not in ("abandoned", "failed"):
                raise ConflictError(f"cannot install M_{round_index}: training round {round_index} is {busy.state}")
            self._tx([("INSERT INTO global_models VALUES (?,?,?,?)", (round_index, digest, float(lr), time.time()))])
        return digest

    # -- rounds --------------------------------------------------------------------------
    def open_round(self, round_index: int, model_in_hash: str, deadline: float, lr: float) -> RoundRecord:
        """Record round i as open from M_{i−1} (idempotent for the same M_{i−1}); an abandoned
        round (below its minimum cohort, or ended for an unlearning job that then failed) opens
        again with its uploads, without its close request."""
        existing = self.round_record(round_index)
        if existing is not None:
            if existing.model_in_hash != model_in_hash:
                raise ConflictError(f"round {round_index} is already open from model {existing.model_in_hash[:12]}…")
            if existing.state == "abandoned":  # M_{i−1} is still current: its uploads count again
                self._tx(
                    [
                        ("UPDATE rounds SET state='open', error='', deadline=? WHERE round=?", (deadline, round_index)),
                        ("DELETE FROM close_requests WHERE round=?", (round_index,)),
                        ("DELETE FROM close_when WHERE round=?", (round_index,)),
                    ]
                )
                return self.round_record(round_index)  # type: ignore[return-value]
            return existing
        expected = self.global_model_hash(round_index - 1)
        if expected != model_in_hash:
            raise StoreError(
                f"cannot open round {round_index}: M_{round_index - 1} here is "
                f"{(expected or 'missing')[:12]}, asked for {model_in_hash[:12]}"
            )
        self._tx(
            [
                (
                    "INSERT INTO rounds (round, state, model_in_hash, deadline, lr, opened) VALUES (?,?,?,?,?,?)",
                    (round_index, "open", model_in_hash, deadline, lr, time.time()),
                )
            ]
        )
        return self.round_record(round_index)  # type: ignore[return-value]

    def round_record(self, round_index: int) -> RoundRecord | None:
        rows = self._query(
            "SELECT round, state, model_in_hash, deadline, lr, opened, membership_sha256, model_out_hash, "
            "peer_bytes, error FROM rounds WHERE round=?",
            (round_index,),
        )
        return RoundRecord(*rows[0]) if rows else None

    def all_round_records(self) -> list[RoundRecord]:
        rows = self._query(
            "SELECT round, state, model_in_hash, deadline, lr, opened, membership_sha256, model_out_hash, "
            "peer_bytes, error FROM rounds ORDER BY round"
        )
        return [RoundRecord(*r) for r in rows]

    def current_round(self) -> RoundRecord | None:
        """The newest round that is not committed or abandoned (open, closing or failed), if any."""
        rows = self._query(  # one statement: the row cannot commit between two reads
            "SELECT round, state, model_in_hash, deadline, lr, opened, membership_sha256, model_out_hash, "
            "peer_bytes, error FROM rounds WHERE state NOT IN ('committed', 'abandoned') ORDER BY round DESC LIMIT 1"
        )
        return RoundRecord(*rows[0]) if rows else None

    def set_round_state(self, round_index: int, state: str, error: str = "") -> None:
        self._tx([("UPDATE rounds SET state=?, error=? WHERE round=?", (state, error, round_index))])

    def extend_deadline(self, round_index: int, deadline: float, note: str = "") -> None:
        """Move an open round's deadline; `note` (why it waits, or "") is served as its error text."""
        self._tx([("UPDATE rounds SET deadline=?, error=? WHERE round=?", (deadline, note, round_index))])

    def request_close(self, round_index: int, clients: list[str]) -> None:
        """Close round i once every client in `clients` has an upload on both parties (an
        empty list: at once). Durable, idempotent; a later request replaces an earlier one."""
        stmts = [
            ("DELETE FROM close_when WHERE round=?", (round_index,)),
            ("INSERT OR REPLACE INTO close_requests VALUES (?,?)", (round_index, time.time())),
        ]
        stmts += [("INSERT INTO close_when VALUES (?,?)", (round_index, c)) for c in sorted(set(clients))]
        self._tx(stmts)

    def close_request(self, round_index: int) -> set[str] | None:
        """The clients round i waits for before it closes (None: no close request)."""
        if not self._query("SELECT 1 FROM close_requests WHERE round=?", (round_index,)):
            return None
        return {c for (c,) in self._query("SELECT client FROM close_when WHERE round=?", (round_index,))}

    def set_membership(
        self,
        round_index: int,
        members: dict[str, int],
        excluded: dict[str, str] | None = None,
        weights: dict[str, int] | None = None,
        principals: dict[str, str] | None = None,
    ) -> str:
        """Fix S of round i with its n_j, the aggregation weights w_j (default n_j) and the members'
        principals, and the excluded clients with their reasons (idempotent for the same S);
        returns its digest."""
        digest = membership_digest(members, round_index)
        rec = self.round_record(round_index)
        if rec is None:
            raise StoreError(f"round {round_index} was never opened here")
        if rec.membership_sha256 is not None:
            if rec.membership_sha256 != digest:
                raise ConflictError(f"round {round_index} already has a different membership")
            return digest
        weights, principals = weights or {}, principals or {}
        stmts = [
            (
                "INSERT INTO members (round, client, n_samples, weight, principal) VALUES (?,?,?,?,?)",
                (round_index, c, int(n), int(weights.get(c, n)), principals.get(c, "")),
            )
            for c, n in members.items()
        ]
        stmts += [
            ("INSERT OR REPLACE INTO exclusions VALUES (?,?,?)", (round_index, c, reason))
            for c, reason in (excluded or {}).items()
        ]
        stmts.append(("UPDATE rounds SET membership_sha256=?, state='agreed' WHERE round=?", (digest, round_index)))
        self._tx(stmts)
        return digest

    def round_members(self, round_index: int) -> dict[str, int]:
        """Agreed membership S of round i: client → n_j (public FedAvg weights)."""
        rows = self._query("SELECT client, n_samples FROM members WHERE round=? ORDER BY client", (round_index,))
        return {c: int(n) for c, n in rows}

    def round_weights(self, round_index: int) -> dict[str, int]:
        """The aggregation weights w_j of round i's members (unlearning.weight_cap; n_j if never capped)."""
        rows = self._query(
            "SELECT client, COALESCE(weight, n_samples) FROM members WHERE round=? ORDER BY client", (round_index,)
        )
        return {c: int(w) for c, w in rows}

    def round_principals(self, round_index: int) -> dict[str, str]:
        """The principals recorded for round i's members (only those enrolled under one)."""
        rows = self._query(
            "SELECT client, principal FROM members WHERE round=? AND principal != '' ORDER BY client", (round_index,)
        )
        return dict(rows)

    def exclusions(self, round_index: int) -> dict[str, str]:
        """Clients left out of round i's membership although a party held an upload: client → reason."""
        rows = self._query("SELECT client, reason FROM exclusions WHERE round=? ORDER BY client", (round_index,))
        return dict(rows)

    def committed_rounds(self) -> list[int]:
        """Indices i ≥ 1 of committed training rounds, ascending."""
        return [int(r[0]) for r in self._query("SELECT round FROM rounds WHERE state='committed' ORDER BY round")]

    def set_round_output(self, round_index: int, arch: str, params: np.ndarray, peer_bytes: int) -> str:
        """Store the candidate M_i (not yet committed) and its hash."""
        digest = self.put_model(arch, params)
        self._tx(
            [
                (
                    "UPDATE rounds SET model_out_hash=?, peer_bytes=?, state='aggregated' "
                    "WHERE round=? AND state != 'committed'",
                    (digest, int(peer_bytes), round_index),
                )
            ]
        )
        return digest

    def add_peer_bytes(self, round_index: int, peer_bytes: int) -> None:
        """Count more party-to-party bytes for round i (its upload check's, beside the aggregate's)."""
        self._tx([("UPDATE rounds SET peer_bytes = peer_bytes + ? WHERE round=?", (int(peer_bytes), round_index))])

    def commit_round(self, round_index: int) -> str:
        """Make the candidate M_i the committed global model of round i (idempotent).

        One writer of the chain at a time: under the lock that `install_global_model` takes,
        M_i is added only when the newest model is M_{i−1} and it is the model the round
        started from; otherwise ConflictError (the round's candidate is not in the chain)."""
        with self._lock:
            rec = self.round_record(round_index)
            if rec is None or rec.model_out_hash is None:
                raise StoreError(f"round {round_index} has no aggregated model to commit")
            if rec.state == "committed":
                return rec.model_out_hash
            existing = self.global_model_hash(round_index)
            if existing is not None and existing != rec.model_out_hash:
                raise ConflictError(f"global model {round_index} is already {existing[:12]}… (installed by a job)")
            if existing is None and self.global_model_hash(round_index - 1) != rec.model_in_hash:
                raise ConflictError(f"round {round_index} started from a model that is no longer M_{round_index - 1}")
            stmts = [("UPDATE rounds SET state='committed' WHERE round=?", (round_index,))]
            if existing is None:
                values = (round_index, rec.model_out_hash, rec.lr, time.time())
                stmts.insert(0, ("INSERT INTO global_models VALUES (?,?,?,?)", values))
            self._tx(stmts)
        return rec.model_out_hash

    # -- training pause (unlearning jobs) ------------------------------------------------
    def set_training_pause(self, job_id: str | None) -> None:
        """Record durably that training is paused for job `job_id` (None: resumed). Written
        before the job fixes its base model, read before any round can open after a restart."""
        if job_id is None:
            self._tx([("DELETE FROM training_pause", ())])
        else:
            self._tx([("INSERT OR REPLACE INTO training_pause VALUES (0,?,?)", (job_id, time.time()))])

    def training_pause(self) -> str | None:
        """The job training is paused for, or None."""
        rows = self._query("SELECT job_id FROM training_pause")
        return rows[0][0] if rows else None

    # -- uploads -------------------------------------------------------------------------
    def _put_share(
        self,
        table: str,
        key_cols: dict,
        path: Path,
        n_samples: int,
        gradient_share: np.ndarray | None,
        norm_share: np.ndarray,
        delta_share: np.ndarray,
        mask_seed: bytes | None,
        num_params: int,
        extra: dict,
        binding_sha256: str,
        guard=None,
        verified_sha256: str | None = None,
    ) -> tuple[str, bool]:
        """Shared path of round uploads and task answers: blob durable first (temp, fsync,
        rename, fsync dir), then the row committed; identical retries (same bytes, same
        binding) are duplicates, checked before `guard` so a retry is answered also after
        the round closed."""
        data, digest = _share_payload(gradient_share, mask_seed, verified_sha256)
        norm_v, delta_v = int(np.asarray(norm_share).reshape(-1)[0]), int(np.asarray(delta_share).reshape(-1)[0])
        key = (int(n_samples), digest, norm_v, delta_v, binding_sha256)
        where = " AND ".join(f"{c}=?" for c in key_cols)
        select = f"SELECT n_samples, grad_sha256, norm_share, delta_share, binding_sha256 FROM {table} WHERE {where}"
        what = ", ".join(f"{c} {v}" for c, v in key_cols.items())
        rows = self._query(select, tuple(key_cols.values()))
        if rows:
            return self._check_duplicate(tuple(rows[0]), key, what)
        tmp = durable.write_temp(path.parent, data) if data is not None else None
        with self._lock:
            rows = self._query(select, tuple(key_cols.values()))
            try:
                if rows:
                    return self._check_duplicate(tuple(rows[0]), key, what)
                if guard is not None:
                    guard()
            except StoreError:
                if tmp is not None:
                    tmp.unlink(missing_ok=True)
                raise
            row = {"n_samples": int(n_samples), "num_params": int(num_params), "grad_sha256": digest}
            row |= {"norm_share": norm_v, "delta_share": delta_v, "received": time.time(), "mask_seed": mask_seed}
            try:
                if tmp is not None:
                    durable.publish(tmp, path)
                self._insert(table, {**key_cols, **row, "binding_sha256": binding_sha256, **extra})
            except BaseException:  # no row: no file either (erasure finds shares by their rows)
                for leftover in (tmp, path if tmp is not None else None):
                    if leftover is not None:
                        leftover.unlink(missing_ok=True)
                raise
        return digest, False

    def _insert(self, table: str, cols: dict) -> None:
        names, marks = ", ".join(cols), ", ".join("?" * len(cols))
        self._tx([(f"INSERT INTO {table} ({names}) VALUES ({marks})", tuple(cols.values()))])

    def put_upload(
        self,
        round_index: int,
        client: str,
        n_samples: int,
        gradient_share: np.ndarray | None,
        norm_share: np.ndarray,
        delta_share: np.ndarray,
        model_in_hash: str,
        mask_seed: bytes | None = None,
        num_params: int | None = None,
        binding_sha256: str = "",
        sample_budget: int | None = None,
        verified_sha256: str | None = None,
    ) -> tuple[str, bool]:
        """Durably store this party's shares of a client's round-i upload (the gradient share,
        or the seed of a seed-compressed mask share with its length `num_params`) with the
        binding of its sharing (proto.binding).

        Returns (content hash, duplicate). A retry with identical content and binding is a
        duplicate (also after the round closed); different content for the same (round,
        client) raises ConflictError. A new upload is accepted only while round i is open
        (checked under the same lock that closes it), so every acknowledged upload is seen
        by the close, and only while the n_j held for round i stay within `sample_budget`
        (SampleBudgetError). `verified_sha256`: the share's hash, when the caller checked it
        against these bytes (`server.uploads.read_body`), so that it is not computed twice.
        """

        def require_open() -> None:
            rec = self.round_record(round_index)
            if rec is None or rec.state != "open":
                raise RoundClosedError(
                    f"round {round_index} is not open for uploads" + ("" if rec is None else f" (it is {rec.state})")
                )
            if sample_budget is not None:
                held = self._query("SELECT COALESCE(SUM(n_samples), 0) FROM uploads WHERE round=?", (round_index,))
                if int(held[0][0]) + int(n_samples) > sample_budget:
                    raise SampleBudgetError(
                        f"round {round_index} holds uploads with Σ n_j = {int(held[0][0])}; n_j = {int(n_samples)} "
                        f"more would exceed the round's sample budget {sample_budget}, past which the aggregate "
                        "could wrap the int64 ring"
                    )

        m = int(gradient_share.size) if gradient_share is not None else int(num_params or 0)
        return self._put_share(
            "uploads",
            {"round": round_index, "client": client},
            self._share_path(round_index, client),
            n_samples,
            gradient_share,
            norm_share,
            delta_share,
            mask_seed,
            m,
            {"model_hash": model_in_hash},
            binding_sha256,
            guard=require_open,
            verified_sha256=verified_sha256,
        )

    @staticmethod
    def _check_duplicate(stored: tuple, new: tuple, what: str) -> tuple[str, bool]:
        if stored != new:
            raise ConflictError(f"a different upload for {what} is already stored; uploads cannot be replaced")
        return new[1], True

    def uploads(self, round_index: int) -> dict[str, UploadRecord]:
        rows = self._query(
            "SELECT client, n_samples, grad_sha256, num_params, binding_sha256 FROM uploads WHERE round=?",
            (round_index,),
        )
        return {c: UploadRecord(c, int(n), h, int(m), b) for c, n, h, m, b in rows}

    def upload(self, round_index: int, client: str) -> UploadRecord | None:
        """This party's record of one client's round-i upload, or None."""
        rows = self._query(
            "SELECT client, n_samples, grad_sha256, num_params, binding_sha256 FROM uploads WHERE round=? AND client=?",
            (round_index, client),
        )
        return UploadRecord(rows[0][0], int(rows[0][1]), rows[0][2], int(rows[0][3]), rows[0][4]) if rows else None

    def load_share(self, round_index: int, client: str) -> ShareBundle:
        """This party's int64 shares of client j's round-i upload ([g], [‖g‖], [δ]) and n_j."""
        rows = self._query(
            "SELECT n_samples, num_params, grad_sha256, norm_share, delta_share, mask_seed FROM uploads "
            "WHERE round=? AND client=?",
            (round_index, client),
        )
        if not rows:
            raise StoreError(f"no stored upload of client {client!r} for round {round_index}")
        return self._load(rows[0], self._share_path(round_index, client), f"client {client!r}, round {round_index}")

    def load_scalar_shares(self, round_index: int, client: str) -> tuple[np.ndarray, np.ndarray]:
        """This party's shares of client j's round-i [‖g‖] and [δ], (1,) int64 each, from the
        upload's row alone: the m-word gradient share is neither read nor expanded (a job's
        threshold determination reads every stored round's [δ])."""
        sql = "SELECT norm_share, delta_share FROM uploads WHERE round=? AND client=?"
        rows = self._query(sql, (round_index, client))
        if not rows:
            raise StoreError(f"no stored upload of client {client!r} for round {round_index}")
        norm_v, delta_v = rows[0]
        return np.array([norm_v], dtype=np.int64), np.array([delta_v], dtype=np.int64)

    # -- clients -------------------------------------------------------------------------
    def register(self, client: str) -> None:
        self._tx(
            [
                (
                    "INSERT INTO clients (client, registered) VALUES (?,?) ON CONFLICT(client) DO NOTHING",
                    (client, time.time()),
                )
            ]
        )

    def registered(self) -> list[str]:
        return [r[0] for r in self._query("SELECT client FROM clients WHERE erased IS NULL ORDER BY client")]

    def is_registered(self, client: str) -> bool:
        """`client in registered()`, by its primary key (an upload's check; not a scan of every client)."""
        return bool(self._query("SELECT 1 FROM clients WHERE client=? AND erased IS NULL", (client,)))

    def is_erased(self, client: str) -> bool:
        return bool(self._query("SELECT 1 FROM clients WHERE client=? AND erased IS NOT NULL", (client,)))

    def shares_held(self, client: str) -> int:
        """How many uploads and task answers of `client` this store still holds (0 after erasure)."""
        rows = self._query(
            "SELECT (SELECT COUNT(*) FROM uploads WHERE client=?) + (SELECT COUNT(*) FROM task_uploads WHERE client=?)",
            (client, client),
        )
        return int(rows[0][0])

    def erasure_receipt(self, client: str) -> EraseReceiptData | None:
        """The receipt of `client`'s erasure on this party, kept since it happened (None if never erased)."""
        rows = self._query("SELECT receipt FROM erasures WHERE client=?", (client,))
        return EraseReceiptData(**json.loads(rows[0][0])) if rows else None

    def erase_client(self, client: str) -> EraseReceiptData:
        """Delete every stored share of `client` (round uploads and task answers: files and
        rows) and mark it erased; public membership rows stay. Returns what was deleted.

        The receipt is committed with the deletion; erasing an erased client again returns
        that receipt (a retry after a lost reply tells the same story)."""
        with self._lock:
            kept = self.erasure_receipt(client)
            if kept is not None:
                return kept
            receipt = EraseReceiptData(party=self.party, client=client, erased_at=time.time())
            rows = self._query("SELECT round, grad_sha256 FROM uploads WHERE client=? ORDER BY round", (client,))
            for round_index, digest in rows:
                path = self._share_path(round_index, client)
                if path.exists():
                    receipt.bytes_deleted += path.stat().st_size
                    path.unlink()
                    receipt.files_deleted += 1
                receipt.rounds.append(int(round_index))
                receipt.content_sha256.append(digest)
            task_rows = self._query("SELECT task_id, grad_sha256 FROM task_uploads WHERE client=?", (client,))
            for task_id, digest in task_rows:
                path = self.root / "tasks" / f"{task_id}.i64"
                if path.exists():
                    receipt.bytes_deleted += path.stat().st_size
                    path.unlink()
                    receipt.files_deleted += 1
                receipt.content_sha256.append(digest)
            receipt.rows_deleted = len(rows) + len(task_rows)
            self._tx(
                [
                    ("DELETE FROM uploads WHERE client=?", (client,)),
                    ("DELETE FROM task_uploads WHERE client=?", (client,)),
                    (
                        "INSERT INTO clients (client, erased) VALUES (?,?) "
                        "ON CONFLICT(client) DO UPDATE SET erased=excluded.erased",
                        (client, receipt.erased_at),
                    ),
                    ("INSERT INTO erasures VALUES (?,?)", (client, json.dumps(asdict(receipt), sort_keys=True))),
                ]
            )
            # copy the zeroed pages into the database file and empty the write-ahead log,
            # which would otherwise still hold the deleted rows
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            for directory in (self.root / "shares").iterdir():
                durable.fsync_dir(directory)
        return receipt

    # -- tasks (Stage II) ----------------------------------------------------------------
    def put_task(self, task: TaskRecord) -> None:
        self._tx(
            [
                (
                    "INSERT OR IGNORE INTO tasks VALUES (?,?,?,?,?,?,?,?,?)",
                    (
                        task.task_id,
                        task.client,
                        task.job_id,
                        task.kind,
                        task.unlearning_round,
                        task.original_round,
                        task.model_hash,
                        task.deadline,
                        time.time(),
                    ),
                )
            ]
        )

    def task(self, task_id: str) -> TaskRecord | None:
        rows = self._query(
            "SELECT task_id, client, job_id, kind, unlearning_round, original_round, model_hash, deadline "
            "FROM tasks WHERE task_id=?",
            (task_id,),
        )
        return TaskRecord(*rows[0]) if rows else None

    def answered(self, task_id: str, client: str) -> bool:
        """Whether `client`'s answer to task `task_id` is stored (its record, not its shares)."""
        rows = self._query(
            "SELECT 1 FROM tasks t JOIN task_uploads u ON t.task_id=u.task_id WHERE t.task_id=? AND t.client=?",
            (task_id, client),
        )
        return bool(rows)

    def _unanswered_tasks(self, column: str, value: str, now: float) -> list[TaskRecord]:
        rows = self._query(
            "SELECT t.task_id, t.client, t.job_id, t.kind, t.unlearning_round, t.original_round, t.model_hash, "
            "t.deadline FROM tasks t LEFT JOIN task_uploads u ON t.task_id=u.task_id "
            f"WHERE t.{column}=? AND u.task_id IS NULL AND t.deadline > ? ORDER BY t.created",
            (value, now),
        )
        return [TaskRecord(*r) for r in rows]

    def open_tasks(self, client: str, now: float) -> list[TaskRecord]:
        """Tasks for `client` that are unanswered and not past their deadline."""
        return self._unanswered_tasks("client", client, now)

    def open_job_tasks(self, job_id: str, now: float) -> list[TaskRecord]:
        """Tasks of job `job_id` that are unanswered here and not past their deadline."""
        return self._unanswered_tasks("job_id", job_id, now)

    def put_task_upload(
        self,
        task_id: str,
        client: str,
        n_samples: int,
        gradient_share: np.ndarray | None,
        norm_share: np.ndarray,
        delta_share: np.ndarray,
        mask_seed: bytes | None = None,
        num_params: int | None = None,
        binding_sha256: str = "",
        verified_sha256: str | None = None,
    ) -> tuple[str, bool]:
        """Durably store this party's share of a task answer (idempotent like `put_upload`)."""
        m = int(gradient_share.size) if gradient_share is not None else int(num_params or 0)
        return self._put_share(
            "task_uploads",
            {"task_id": task_id},
            self.root / "tasks" / f"{task_id}.i64",
            n_samples,
            gradient_share,
            norm_share,
            delta_share,
            mask_seed,
            m,
            {"client": client},
            binding_sha256,
            verified_sha256=verified_sha256,
        )

    def _load(self, row: tuple, path: Path, what: str) -> ShareBundle:
        n, m, digest, norm_v, delta_v, seed = row
        if seed is not None:
            if sha256_hex(seed) != digest:
                raise StoreError(f"mask seed of {what} is corrupt")
            try:
                grad = expand_mask(bytes(seed), m)
            except MaskSeedError as exc:
                raise StoreError(f"mask seed of {what} cannot be expanded: {exc}") from None
        else:
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                raise StoreError(f"share file of {what} is missing (the store is corrupt)") from None
            if len(data) != 8 * m or sha256_hex(data) != digest:
                raise StoreError(f"share file of {what} is corrupt")
            grad = np.frombuffer(data, dtype="<i8").astype(np.int64)
        return ShareBundle(grad, np.array([norm_v], dtype=np.int64), np.array([delta_v], dtype=np.int64), int(n))

    def load_task_share(self, task_id: str) -> ShareBundle | None:
        """This party's shares of a task answer, or None while unanswered."""
        rows = self._query(
            "SELECT n_samples, num_params, grad_sha256, norm_share, delta_share, mask_seed FROM task_uploads "
            "WHERE task_id=?",
            (task_id,),
        )
        if not rows:
            return None
        return self._load(rows[0], self.root / "tasks" / f"{task_id}.i64", f"task {task_id}")
