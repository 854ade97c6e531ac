"""Modes of everything a party keeps at rest: directories 0700, files 0600, whatever the umask.

A party's store holds one share of every client's gradient and the mask seeds of the
other share (docs/SERVICE.md, "The store"): a local user who reads both parties' stores
rebuilds every gradient. So every directory a party, its job workers or `starfish up`
create is made with mode 0700 and every file with 0600 (`private_dir`, `open_private`,
`write_private`; the modes and `private_dir` are those of the durable writes,
`mpc.durable`); the party and worker processes also run under umask 077, which covers
every other file they write (reports, logs, task answers). SQLite gives its `-wal` and
`-shm` files the mode of the database file, which `private_sqlite_path` creates 0600.

A store made before (or by hand) with looser modes is refused at start (`check_private`):
the error names the path and its mode instead of serving from it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from mpc.durable import DIR_MODE, FILE_MODE, private_dir

__all__ = ["DIR_MODE", "FILE_MODE", "check_private", "open_private", "private_dir", "restrict_umask", "write_private"]
PRIVATE_UMASK = 0o077
EXPOSED_BITS = 0o077  #: any group or other permission


class ExposedStoreError(PermissionError):
    """A store path that users other than the party's own may read or write."""


def restrict_umask() -> None:
    """Run this process (and the workers it starts) under umask 077."""
    os.umask(PRIVATE_UMASK)


def open_private(path: Path, flags: int = os.O_WRONLY | os.O_CREAT | os.O_TRUNC) -> int:
    """os.open with mode 0600 for a file created now (the umask can only remove bits)."""
    return os.open(path, flags, FILE_MODE)


def write_private(path: Path, data: bytes | str) -> None:
    """Write a whole file created 0600 (not atomic: for files in a fresh private folder)."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    with os.fdopen(open_private(Path(path)), "wb") as fh:
        fh.write(raw)


def private_sqlite_path(path: Path) -> Path:
    """Create the SQLite file 0600 before SQLite opens it; its -wal/-shm files take this mode."""
    os.close(open_private(Path(path), os.O_RDWR | os.O_CREAT))
    return Path(path)


def exposed(path: Path) -> int:
    """The group/other permission bits of `path` (0 when private or absent)."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode) & EXPOSED_BITS
    except FileNotFoundError:
        return 0


def check_private(data_dir: Path) -> None:
    """Refuse a store directory (or its databases) that other users may read or write."""
    root = Path(data_dir)
    paths = [root] + [root / name for name in ("meta.sqlite", "meta.sqlite-wal", "meta.sqlite-shm")]
    paths += [root / "jobs"] + [root / "jobs" / name for name in ("jobs.sqlite", "jobs.sqlite-wal", "jobs.sqlite-shm")]
    for path in paths:
        bits = exposed(path)
        if bits:
            mode = stat.S_IMODE(os.stat(path).st_mode)
            raise ExposedStoreError(
                f"{path} has mode {mode:04o}: other users may read or write it, and the store holds secret "
                f"shares and mask seeds; make it private (chmod -R go-rwx {root}) and start again"
            )
