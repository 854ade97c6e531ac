"""One trained service shared by the Stage II tests (training takes most of a minute)."""
from __future__ import annotations

import pytest

from stage2_fixtures import TrainedService

STAGE2_CLIENTS = [f"c{i}" for i in range(6)]
STAGE2_ROUNDS = 8
TASK_TIMEOUT_S = 2.5  #: short, so a client that never answers costs little time


@pytest.fixture(scope="session")
def stage2(tmp_path_factory):
    svc = TrainedService.create(tmp_path_factory.mktemp("stage2"), STAGE2_CLIENTS, rounds=STAGE2_ROUNDS,
                                jobs={"task_timeout_s": TASK_TIMEOUT_S})
    yield svc
    svc.stop()
