"""Durable file writes: temp file in the target directory, fsync, rename, fsync directory.

After `atomic_write` returns, the file exists with its full content or (after a crash
before the rename) not at all; it never exists half-written. Files are created 0600 and
directories 0700 (server.file_modes). A write that fails (a full or read-only disk) removes
its temp file at once; a crash leaves it to `remove_stale_temps`.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from server.file_modes import open_private, private_dir


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_temp(directory: Path, data: bytes | memoryview) -> Path:
    """Write `data` to a fresh temp file in `directory` and fsync it (not yet visible)."""
    private_dir(directory)
    tmp = directory / f".tmp-{secrets.token_hex(8)}"
    try:
        with os.fdopen(open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL), "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:  # a full or read-only disk: leave no partial temp file behind
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def publish(tmp: Path, final: Path) -> None:
    """Atomically rename a synced temp file into place and make the rename durable."""
    os.replace(tmp, final)
    fsync_dir(final.parent)


def atomic_write(final: Path, data: bytes) -> None:
    tmp = write_temp(final.parent, data)
    try:
        publish(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def remove_stale_temps(root: Path) -> int:
    """Delete temp files left by a crash between write and rename; returns how many. A temp
    *folder* (a job checkpoint being written, server.jobs.checkpoints) is not ours: the job's
    own `CheckpointDir` clears it when the job resumes."""
    count = 0
    for tmp in root.rglob(".tmp-*"):
        if tmp.is_dir():
            continue
        tmp.unlink(missing_ok=True)
        count += 1
    return count
