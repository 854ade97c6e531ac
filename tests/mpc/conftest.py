"""One long-lived dealer + two-party cluster for the whole test session (process start is slow)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mpc.cluster import ClusterConfig, TwoPartyCluster


@pytest.fixture(scope="session")
def cluster() -> Iterator[TwoPartyCluster]:
    c = TwoPartyCluster(timeout=180, config=ClusterConfig(session_timeout_s=60))
    c.start()
    try:
        yield c
    finally:
        c.close()
