"""Test-session ordering for `pytest -n N --dist loadfile` (the README's test command).

xdist hands out whole files in collection order; a file of several minutes that starts last
leaves one worker running it after the others have finished. The longest files therefore
start first (longest-processing-time-first scheduling); every other test keeps its order.
"""

from __future__ import annotations

import pytest

#: files that take two minutes or more of one worker on the CI machine (`--durations`), longest first
LONGEST_FIRST = (
    "tests/integration/test_flwr_run_deployment.py",
    "tests/netns/test_multihost_job.py",
    "tests/faults/test_job_faults.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))
