"""Waiting in the tests for something another process or thread does: one poll loop."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def poll(check: Callable[[], T | None], timeout_s: float, interval_s: float = 0.1) -> T | None:
    """The first result of `check()` other than None or False, tried every `interval_s` seconds
    until `timeout_s` have passed (at least once); None when none came. A check that raises
    ends the wait (e.g. an AssertionError when what it waits for can no longer happen)."""
    end = time.monotonic() + timeout_s
    while True:
        value = check()
        if value is not None and value is not False:
            return value
        if time.monotonic() >= end:
            return None
        time.sleep(interval_s)
