"""Session fixture: a running pair of party processes for the service tests (see server_fixtures)."""

from __future__ import annotations

import numpy as np
import pytest

from harness.local import LocalDeployment

from helpers.server_fixtures import CLIENTS, M


@pytest.fixture(scope="session")
def parties(tmp_path_factory):
    dep = LocalDeployment(
        tmp_path_factory.mktemp("svc"),
        clients=CLIENTS,
        rounds={"deadline_s": 3600.0, "poll_s": 0.05},
        observability={"log_format": "json"},  # the observability tests read these logs
    )
    dep.start()
    try:
        admin = dep.admin()
        admin.start_training("toy", np.linspace(-1, 1, M).astype(np.float32), 0.1)
        admin.close()
        for c in CLIENTS[:5]:
            with dep.client(c) as cl:
                cl.register()
        with dep.client("c0") as cl:
            cl.wait_for_round(0, timeout_s=90)
        yield dep
    finally:
        dep.stop()
