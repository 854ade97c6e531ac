"""Real storage faults for the fault tests (root only): a small tmpfs as a party's data dir that a
ballast file fills up, and read-only bind mounts over a sub-directory of a running party's store.
Every mount is created and removed by the test that uses it."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

CHUNKS = (1 << 20, 1 << 12, 1 << 9)


def require_root() -> None:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("storage faults need root and mount(8) (tmpfs, read-only bind mounts)")


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


def fill(path: Path) -> Path:
    """Fill the file system holding `path` with a ballast file until no byte is left."""
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
    return ballast


@contextlib.contextmanager
def disk_full(path: Path) -> Iterator[None]:
    """The file system holding `path` (a test's tmpfs) is full for the duration of the block."""
    ballast = fill(path)
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
