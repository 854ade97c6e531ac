"""The one durable write (mpc.durable): full content or the old one, private modes, no temp left."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator

import pytest

from mpc import durable


@pytest.fixture
def open_umask() -> Iterator[None]:
    """A umask that would leave files world-readable: the modes must not depend on it."""
    old = os.umask(0o000)
    yield
    os.umask(old)


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_atomic_write_is_private_whatever_the_umask(tmp_path, open_umask):
    target = tmp_path / "a" / "b" / "blob"
    durable.atomic_write(target, b"share")
    assert target.read_bytes() == b"share"
    assert _mode(target) == 0o600
    assert _mode(tmp_path / "a") == 0o700 and _mode(tmp_path / "a" / "b") == 0o700


def test_parts_are_concatenated_and_a_public_mode_is_kept(tmp_path, open_umask):
    target = tmp_path / "ca.pem"
    durable.atomic_write(target, [b"-----BEGIN", b" CERT"], mode=0o644)
    assert target.read_bytes() == b"-----BEGIN CERT"
    assert _mode(target) == 0o644


class _DiskFull(OSError):
    pass


def _failing_parts() -> Iterator[bytes]:
    yield b"half of the new"
    raise _DiskFull("no space left on device")


def test_a_failed_write_keeps_the_old_content_and_leaves_no_temp(tmp_path):
    target = tmp_path / "state.json"
    durable.atomic_write(target, b"old")
    with pytest.raises(_DiskFull):
        durable.atomic_write(target, _failing_parts())  # type: ignore[arg-type]
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]


def test_split_write_is_invisible_until_published_and_stale_temps_are_removed(tmp_path):
    tmp = durable.write_temp(tmp_path, b"payload")
    final = tmp_path / "blob"
    assert not final.exists() and tmp.name.startswith(durable.TEMP_PREFIX)
    durable.publish(tmp, final)
    assert final.read_bytes() == b"payload"
    durable.write_temp(tmp_path, b"crash before rename")
    assert durable.remove_stale_temps(tmp_path) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blob"]


def test_append_synced_appends_to_a_private_file(tmp_path, open_umask):
    log = tmp_path / "releases.jsonl"
    durable.append_synced(log, b"1\n")
    durable.append_synced(log, b"2\n")
    assert log.read_bytes() == b"1\n2\n" and _mode(log) == 0o600
