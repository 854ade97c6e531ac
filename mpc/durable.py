"""Durable, private file writes: the one mechanism of the parties, their job workers, the
deployment's CA and the client SDK's outbox (standard library only).

`atomic_write(path, data)`: a fresh temp file `.tmp-<random>` in the target directory,
created with `mode` (0600 unless the caller says otherwise, e.g. a public certificate)
and O_EXCL, written, fsynced, renamed over `path` (`os.replace`, atomic on POSIX), then
the directory fsynced so the rename survives a power loss. After it returns the file has
its full new content; a crash before the rename leaves the old content (or no file);
nothing is ever half-written. A write that fails (a full or read-only disk) removes its
temp file at once; a crash leaves a `.tmp-*` file to `remove_stale_temps`. A caller that
renames several files and syncs the directory once passes `sync_dir=False`.

Split use: `write_temp` (synced, not yet visible) and `publish` (rename, sync directory)
let a caller put the data on disk before it commits a database row, then make it
visible. `synced_file` is a file created 0600 and fsynced on close, for files inside a
temp directory that is published whole; `append_synced` appends and fsyncs (a log).

Modes: directories 0700 and files 0600 whatever the umask (`private_dir`): a party's
store holds shares and mask seeds (docs/SERVICE.md, "The store"; `server.file_modes`).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

DIR_MODE = 0o700
FILE_MODE = 0o600
TEMP_PREFIX = ".tmp-"

Data = bytes | memoryview | Sequence[bytes]
"""One buffer, or parts written one after another."""


def private_dir(path: Path) -> Path:
    """Create `path` and its missing parents with mode 0700 (existing ones are left as they are)."""
    path = Path(path)
    missing = []
    probe = path
    while not probe.exists():
        missing.append(probe)
        probe = probe.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=DIR_MODE)
        except FileExistsError:
            pass  # made meanwhile by another thread or process
        os.chmod(directory, DIR_MODE)
    return path


def fsync_dir(path: Path) -> None:
    """Make the entries of directory `path` (a rename, a new file) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fh: BinaryIO, data: Data) -> None:
    if isinstance(data, bytes | bytearray | memoryview):
        fh.write(data)
    else:
        fh.writelines(data)


@contextmanager
def synced_file(path: Path, mode: int = FILE_MODE) -> Iterator[BinaryIO]:
    """A new file (O_EXCL, `mode`) to write; flushed and fsynced when the block ends."""
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), "wb") as fh:
        yield fh
        fh.flush()
        os.fsync(fh.fileno())


def write_temp(directory: Path, data: Data, mode: int = FILE_MODE) -> Path:
    """Write `data` to a fresh temp file in `directory` (made 0700 if missing) and fsync it (not yet visible)."""
    private_dir(directory)
    tmp = Path(directory) / f"{TEMP_PREFIX}{secrets.token_hex(8)}"
    try:
        with synced_file(tmp, mode) as fh:
            _write_all(fh, data)
    except BaseException:  # a full or read-only disk: leave no partial temp file behind
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def publish(tmp: Path, final: Path, sync_dir: bool = True) -> None:
    """Atomically rename a synced temp file (or directory) into place and make the rename durable."""
    os.replace(tmp, final)
    if sync_dir:
        fsync_dir(Path(final).parent)


def atomic_write(final: Path, data: Data, mode: int = FILE_MODE, sync_dir: bool = True) -> None:
    """`final` holds `data` in full, durably, or keeps its old content (module docstring)."""
    tmp = write_temp(Path(final).parent, data, mode)
    try:
        publish(tmp, final, sync_dir)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def append_synced(path: Path, data: bytes) -> None:
    """Append `data` to `path` (created with 0600) and fsync before returning."""
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, FILE_MODE), "ab") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def remove_stale_temps(root: Path) -> int:
    """Delete temp files left by a crash between write and rename; returns how many. A temp
    *folder* (a job checkpoint being written, server.jobs.checkpoints) is not ours: the job's
    own `CheckpointDir` clears it when the job resumes."""
    count = 0
    for tmp in Path(root).rglob(f"{TEMP_PREFIX}*"):
        if tmp.is_dir():
            continue
        tmp.unlink(missing_ok=True)
        count += 1
    return count
