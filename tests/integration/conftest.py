"""One trained service shared by the Stage II tests (training takes most of a minute)."""

from __future__ import annotations

import pytest

from stage2_fixtures import STAGE2_CLIENTS, STAGE2_ROUNDS, TASK_TIMEOUT_S, TrainedService


@pytest.fixture(scope="session")
def stage2(tmp_path_factory):
    svc = TrainedService.create(
        tmp_path_factory.mktemp("stage2"), STAGE2_CLIENTS, rounds=STAGE2_ROUNDS, jobs={"task_timeout_s": TASK_TIMEOUT_S}
    )
    yield svc
    svc.stop()
