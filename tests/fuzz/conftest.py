"""One real deployment per fuzz module (fuzz_deployment.py): started once, stopped after the module."""

from __future__ import annotations

import numpy as np
import pytest

from harness.local import LocalDeployment

from helpers.fuzz_deployment import DIM, FUZZ_CLIENT, TRAINERS, train_round


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    dep = LocalDeployment(
        tmp_path_factory.mktemp("fuzz"),
        clients=[*TRAINERS, FUZZ_CLIENT],
        rounds={"deadline_s": 20.0, "poll_s": 0.05},
        jobs={"poll_s": 0.1},
    )
    dep.start()
    try:
        with dep.admin() as admin:
            admin.start_training("fuzz", np.zeros(DIM, dtype=np.float32), 0.1)
        train_round(dep)
        yield dep
    finally:
        dep.stop()
