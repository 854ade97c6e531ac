"""A private Ray temp directory per simulation run: two runs on different test workers must
not share /tmp/ray (their session directories and sockets collide and one waits out Ray's
start-up timeout), and Ray's socket paths must stay below the 107-byte Unix limit, so the
directory is a short one directly under /tmp."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def private_ray_dir() -> Iterator[dict[str, str]]:
    """The environment switch (`RAY_TMPDIR`) of a fresh directory, removed afterwards."""
    path = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    try:
        yield {"RAY_TMPDIR": path}
    finally:
        shutil.rmtree(path, ignore_errors=True)
