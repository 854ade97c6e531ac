"""Network-namespace tests: skipped with the reason when this machine cannot build a lab.

Every lab is named after this process's id; labs left behind by a test run that was killed
are swept before the first test here.
"""

from __future__ import annotations

import pytest

from harness.netlab.lab import sweep, unavailable

_REASON = unavailable()


def pytest_collection_modifyitems(config, items):
    if _REASON is None:
        return
    skip = pytest.mark.skip(reason=f"network namespaces unavailable: {_REASON}")
    for item in items:
        if item.get_closest_marker("needs_netns"):
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def _sweep_stale_labs():
    if _REASON is None:
        sweep()
    yield
