"""Real storage faults for the fault tests (root only; `bench.disk_faults`): a small tmpfs as a
party's data dir that a ballast file fills up, and read-only bind mounts over a sub-directory of
a running party's store. Every mount is created and removed by the test that uses it."""

from __future__ import annotations

import pytest

from bench.disk_faults import can_mount, disk_full, fill, read_only, tmpfs

__all__ = ["disk_full", "fill", "read_only", "require_root", "tmpfs"]


def require_root() -> None:
    if not can_mount():
        pytest.skip("storage faults need root and mount(8) (tmpfs, read-only bind mounts)")
