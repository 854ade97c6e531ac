"""Two running deployments for the SDK tests: `sdk_parties` (clients a0..a3 registered,
round 1 open with a long deadline) and `sdk_twin` with the same certificates and
credentials but a different initial model (to catch a party serving another model)."""
from __future__ import annotations

import numpy as np
import pytest

from server.local import LocalDeployment

M = 48


def _deploy(root, m0: np.ndarray, twin_of=None) -> LocalDeployment:
    dep = LocalDeployment(root, clients=["a0", "a1", "a2", "a3", "a4"], rounds={"deadline_s": 3600.0, "poll_s": 0.05},
                          same_identity_as=twin_of)
    dep.start()
    admin = dep.admin()
    admin.start_training("toy", m0, 0.1)
    admin.close()
    with dep.client("a0") as c:
        c.wait_for_round(0, timeout_s=20)  # both parties hold M_0 and round 1 is open
    return dep


@pytest.fixture(scope="session")
def sdk_parties(tmp_path_factory):
    dep = _deploy(tmp_path_factory.mktemp("sdk"), np.zeros(M, dtype=np.float32))
    for c in ("a0", "a1", "a2", "a3"):
        with dep.client(c) as cl:
            cl.register()
    yield dep
    dep.stop()


@pytest.fixture(scope="session")
def sdk_twin(tmp_path_factory, sdk_parties):
    dep = _deploy(tmp_path_factory.mktemp("twin"), np.ones(M, dtype=np.float32), twin_of=sdk_parties)
    yield dep
    dep.stop()
