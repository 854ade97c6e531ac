"""`StarfishFedAvg.start` against real parties that cannot serve a Flower strategy: it stops
before installing a model or opening a round, with one message naming the fix, instead of
training into a round that waits for every registered client or is abandoned below the
minimum cohort."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord

from client_sdk.errors import StarfishError
from harness.local import LocalDeployment
from proto.starfish.v1 import common_pb2
from starfish_flower import StarfishFedAvg

pytestmark = pytest.mark.timeout(300)


class Nodes:
    """The Flower grid as the checks see it before the first round: the connected nodes."""

    def __init__(self, count: int):
        self.count = count

    def get_node_ids(self):
        return list(range(1, self.count + 1))


def _initial() -> ArrayRecord:
    return ArrayRecord({"w": Array(np.zeros(4, dtype=np.float32))})


@pytest.fixture
def deployment(request, tmp_path):
    dep = LocalDeployment(tmp_path / "dep", clients=[f"client{i}" for i in range(4)], **request.param)
    dep.start()
    yield dep
    dep.stop()


@pytest.mark.parametrize("deployment", [{}], indirect=True)  # starfish up's default: opening = "auto"
def test_a_party0_that_opens_rounds_by_itself_is_refused_before_any_round(deployment):
    with deployment.admin() as admin:
        assert admin.status().opening == "auto"
        strategy = StarfishFedAvg(admin, "logreg-4", 1.0, fraction_train=1.0, min_available_nodes=4)
        with pytest.raises(StarfishError, match=r'opening = "auto".*--opening on_request'):
            strategy.start(Nodes(4), _initial(), 1)
        assert admin.status().phase == common_pb2.ROUND_PHASE_NOT_STARTED  # no model installed


@pytest.mark.parametrize(
    "deployment", [{"rounds": {"opening": "on_request"}, "privacy": {"min_cohort": 3}}], indirect=True
)
def test_flowers_default_two_nodes_against_a_cohort_of_three_is_refused_before_any_round(deployment):
    with deployment.admin() as admin:
        assert (admin.status().opening, admin.status().min_cohort) == ("on_request", 3)
        strategy = StarfishFedAvg(admin, "logreg-4", 1.0)  # FedAvg's defaults: fraction 1.0, min 2 nodes
        with pytest.raises(StarfishError, match=r"samples 2 node\(s\) per round.*at least 3 members"):
            strategy.start(Nodes(2), _initial(), 1)
        assert admin.status().phase == common_pb2.ROUND_PHASE_NOT_STARTED
