"""Real storage faults on a party's store (root only), for the fault tests and the soak: a small
tmpfs as a party's data dir that a ballast file fills up, and read-only bind mounts over a
sub-directory of a running party's store. Whoever mounts one removes it (context managers)."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

CHUNKS = (1 << 20, 1 << 12, 1 << 9)


def can_mount() -> bool:
    """Whether this process may mount file systems (root, with mount(8) installed)."""
    return os.geteuid() == 0 and shutil.which("mount") is not None


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True)


def _umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)


@contextlib.contextmanager
def tmpfs(path: Path, size_mib: int) -> Iterator[Path]:
    """A tmpfs of `size_mib` MiB mounted at `path` (created) for the duration of the block."""
    path.mkdir(parents=True, exist_ok=True)
    _mount("-t", "tmpfs", "-o", f"size={size_mib}m,mode=0700", "tmpfs", str(path))
    try:
        yield path
    finally:
        _umount(path)


def fill(path: Path, leave: int = 0) -> Path:
    """Fill the file system holding `path` with a ballast file until no byte is left, then give
    back `leave` bytes (room for a small write, not for a model)."""
    ballast = path / "ballast.bin"
    with open(ballast, "ab", buffering=0) as fh:
        for size in CHUNKS:
            block = b"\0" * size
            while True:
                try:
                    fh.write(block)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    if leave:
        os.truncate(ballast, max(0, ballast.stat().st_size - leave))
    return ballast


@contextlib.contextmanager
def disk_full(path: Path, leave: int = 0) -> Iterator[None]:
    """The file system holding `path` (a tmpfs) is full (but `leave` bytes) for the block."""
    ballast = fill(path, leave)
    try:
        yield
    finally:
        ballast.unlink()


@contextlib.contextmanager
def read_only(path: Path) -> Iterator[None]:
    """`path` (a directory of a running party's store) is a read-only bind mount for the block:
    files can no longer be created there (EROFS), as on a store remounted read-only."""
    _mount("--bind", str(path), str(path))
    try:
        _mount("-o", "remount,bind,ro", str(path))
        yield
    finally:
        _umount(path)
