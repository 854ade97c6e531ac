"""The client's on-disk outbox: each sharing is made once and resent unchanged.

Per (client, round or task) the SDK writes, before the first byte is sent,

    <key>.shares   both halves of the sharing (raw bytes; it reveals g, so mode 0600)
    <key>.json     the public facts: target, sharing id, commitments, fingerprint, acks

each to a temp file that is fsynced and renamed, the directory fsynced after. Every retry,
also by a restarted process, resends these bytes, so the two parties always receive two
halves of the same sharing. Each party's acknowledgement is recorded durably when it
arrives; with the second, the `.shares` file is deleted in the same step (new record
renamed, shares unlinked, one directory fsync; the entry is *compacted*: nothing secret
stays, and a `.shares` file left beside a compacted record by a crash is deleted when the
record is read). The `.json` receipt is deleted once both parties report the round's
outcome (counted, excluded, or closed without it).

Files are JSON and raw bytes only (nothing is unpickled); the directory is mode 0700.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

from client_sdk.errors import StarfishError
from client_sdk.sharing import Half, Sharing
from mpc import durable

FORMAT = 1
HALF_FIELDS = ("data", "seed", "norm", "delta", "nonce")


class OutboxError(StarfishError):
    """An outbox file is unreadable or does not match its record."""


@dataclass(frozen=True)
class Entry:
    """One outbox entry: the public record, and the sharing until both parties acknowledged."""

    target: str
    n_samples: int
    model_hash: str
    deadline: float  #: the round's or task's deadline when the sharing was made (retry budget)
    sharing_id: str  #: hex
    fingerprint: str
    binding_sha256: str
    content_sha256: tuple[str, str]
    acked: tuple[bool, bool]
    duplicate: tuple[bool, bool]
    created: float
    sharing: Sharing | None  #: None once compacted
    shares_sha256: str | None  #: of the `.shares` file; None once compacted

    def with_ack(self, party: int, duplicate: bool) -> Entry:
        acked, dup = list(self.acked), list(self.duplicate)
        acked[party], dup[party] = True, duplicate
        return replace(self, acked=(acked[0], acked[1]), duplicate=(dup[0], dup[1]))


def default_outbox_root() -> Path:
    """$STARFISH_OUTBOX, else $XDG_DATA_HOME/starfish/outbox, else ~/.local/share/starfish/outbox."""
    if os.environ.get("STARFISH_OUTBOX"):
        return Path(os.environ["STARFISH_OUTBOX"])
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "starfish" / "outbox"


def federation_id(ca_cert: bytes, party0: str, party1: str) -> str:
    """Names a deployment (its CA and the two addresses), so outboxes of different ones never mix."""
    h = hashlib.sha256(ca_cert)
    h.update(f"\x00{party0}\x00{party1}".encode())
    return h.hexdigest()[:16]


class Outbox:
    """The outbox of one client id in one deployment (a directory of entries)."""

    def __init__(self, directory: str | Path):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self.dir, 0o700)
        self._lock = threading.Lock()  #: the two parties' acknowledgements arrive on two threads
        self._cache: dict[str, Entry] = {}  #: entries read or written by this process
        for stale in self.dir.glob(".tmp-*"):
            stale.unlink(missing_ok=True)

    def _stem(self, target: str) -> Path:
        kind, _, value = target.partition(":")
        if kind == "round":
            return self.dir / f"round-{int(value):08d}"
        return self.dir / f"task-{hashlib.sha256(value.encode('utf-8')).hexdigest()[:32]}"

    def save(self, sharing: Sharing, deadline: float) -> Entry:
        """Persist a new sharing (shares first, then the record); returns its entry."""
        stem = self._stem(sharing.target)
        parts = [getattr(h, f) for h in sharing.halves for f in HALF_FIELDS]
        digest = hashlib.sha256()
        for part in parts:
            digest.update(part)
        durable.atomic_write(stem.with_suffix(".shares"), parts)
        entry = Entry(
            sharing.target,
            sharing.n_samples,
            sharing.model_hash,
            float(deadline),
            sharing.sharing_id.hex(),
            sharing.fingerprint,
            sharing.binding_sha256,
            (sharing.halves[0].content_sha256, sharing.halves[1].content_sha256),
            (False, False),
            (False, False),
            time.time(),
            sharing,
            digest.hexdigest(),
        )
        self._write_record(entry)
        self._cache[entry.target] = entry
        return entry

    def _write_record(self, entry: Entry, sync_dir: bool = True) -> None:
        s = entry.sharing
        record = {
            "format": FORMAT,
            "target": entry.target,
            "n_samples": entry.n_samples,
            "model_hash": entry.model_hash,
            "deadline": entry.deadline,
            "sharing_id": entry.sharing_id,
            "fingerprint": entry.fingerprint,
            "binding_sha256": entry.binding_sha256,
            "content_sha256": list(entry.content_sha256),
            "acked": list(entry.acked),
            "duplicate": list(entry.duplicate),
            "created": entry.created,
            "shares_sha256": entry.shares_sha256,
        }
        if s is not None:
            record.update(
                num_params=s.num_params,
                commitments=[c.hex() for c in s.commitments],
                layout=[[len(getattr(h, f)) for f in HALF_FIELDS] for h in s.halves],
            )
        path = self._stem(entry.target).with_suffix(".json")
        durable.atomic_write(path, [json.dumps(record).encode("utf-8")], sync_dir=sync_dir)

    def record_ack(self, target: str, party: int, duplicate: bool) -> Entry:
        """Durably note party p's acknowledgement; compacts the entry once both parties acked
        (the new record and the deletion of the shares made durable by one directory fsync)."""
        with self._lock:
            entry = self.load(target)
            if entry is None:
                raise OutboxError(f"no outbox entry for {target}")
            updated = entry.with_ack(party, duplicate)
            if all(updated.acked):
                updated = replace(updated, sharing=None, shares_sha256=None)
                self._write_record(updated, sync_dir=False)
                self._stem(target).with_suffix(".shares").unlink(missing_ok=True)
                durable.fsync_dir(self.dir)
            else:
                self._write_record(updated)
            self._cache[target] = updated
            return updated

    def load(self, target: str) -> Entry | None:
        """The entry of `target`, or None. A `.shares` file without a record was never sent: removed."""
        if target in self._cache:
            return self._cache[target]
        stem = self._stem(target)
        record_path, shares_path = stem.with_suffix(".json"), stem.with_suffix(".shares")
        if not record_path.exists():
            shares_path.unlink(missing_ok=True)
            return None
        try:
            record = json.loads(record_path.read_text())
        except (OSError, ValueError) as exc:
            raise OutboxError(f"outbox record {record_path} is unreadable: {exc}") from exc
        if record.get("format") != FORMAT or record.get("target") != target:
            raise OutboxError(f"outbox record {record_path} is not a format-{FORMAT} record of {target}")
        sharing = None
        if record["shares_sha256"] is not None:
            sharing = self._read_sharing(record, shares_path)
        else:
            shares_path.unlink(missing_ok=True)  # compacted, but a crash kept the shares: delete them now
        self._cache[target] = entry = Entry(
            target,
            int(record["n_samples"]),
            record["model_hash"],
            float(record["deadline"]),
            record["sharing_id"],
            record["fingerprint"],
            record["binding_sha256"],
            tuple(record["content_sha256"]),
            tuple(record["acked"]),
            tuple(record["duplicate"]),
            float(record["created"]),
            sharing,
            record["shares_sha256"],
        )
        return entry

    def _read_sharing(self, record: dict, path: Path) -> Sharing:
        try:
            blob = path.read_bytes()
        except OSError as exc:
            raise OutboxError(f"outbox shares {path} are missing although not both parties acknowledged") from exc
        if hashlib.sha256(blob).hexdigest() != record["shares_sha256"]:
            raise OutboxError(f"outbox shares {path} do not match their record (corrupted?)")
        halves, pos = [], 0
        for lengths in record["layout"]:
            parts = []
            for n in lengths:
                parts.append(blob[pos : pos + n])
                pos += n
            halves.append(Half(*parts))
        return Sharing(
            record["target"],
            int(record["n_samples"]),
            record["model_hash"],
            int(record["num_params"]),
            bytes.fromhex(record["sharing_id"]),
            (halves[0], halves[1]),
            tuple(bytes.fromhex(c) for c in record["commitments"]),
            record["fingerprint"],
        )

    def remove(self, target: str) -> None:
        """Forget an entry whose outcome both parties reported."""
        self._cache.pop(target, None)
        stem = self._stem(target)
        for suffix in (".shares", ".json"):
            stem.with_suffix(suffix).unlink(missing_ok=True)
        durable.fsync_dir(self.dir)

    def targets(self) -> list[str]:
        """Targets of every entry, oldest first."""
        records = []
        for path in self.dir.glob("*.json"):
            try:
                record = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            records.append((record.get("created", 0.0), record.get("target", "")))
        return [t for _, t in sorted(records) if t]
