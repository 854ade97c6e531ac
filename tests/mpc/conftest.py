"""One long-lived dealer + two-party cluster for the whole test session (process start is slow)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mpc.cluster import ClusterConfig, TwoPartyCluster


@pytest.fixture(scope="session")
def cluster() -> Iterator[TwoPartyCluster]:
    # one cluster for the whole run: its dealer session must outlast the other files' tests
    c = TwoPartyCluster(timeout=180, config=ClusterConfig(session_timeout_s=60, dealer_idle_timeout_s=4 * 3600.0))
    c.start()
    try:
        yield c
    finally:
        c.close()
