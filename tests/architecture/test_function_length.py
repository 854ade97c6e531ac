"""No function or method of the source tree is longer than 60 lines (its def to its last line)."""

from __future__ import annotations

from helpers.source_tree import functions

MAX_LINES = 60


def test_every_function_is_at_most_60_lines() -> None:
    long = [f"{path}:{line} {name} has {n} lines" for path, line, name, n in functions() if n > MAX_LINES]
    assert not long, "\n".join(long)


def test_the_check_sees_the_source_tree() -> None:
    names = {(path, name) for path, _, name, _ in functions()}
    assert ("mpc/protocols/sectc.py", "sec_tc") in names and ("server/workers/worker.py", "main") in names
