"""The strategy's start-up checks fail with one message naming the fix (no abandoned round,
no silent wait), and every wait is bounded and says what it waits for."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from client_sdk.errors import StarfishError
from proto.starfish.v1 import admin_pb2
from starfish_flower import preflight


class Nodes:
    """A Grid as far as the checks look at it: the connected node ids."""

    def __init__(self, count: int):
        self.count = count

    def get_node_ids(self):
        return list(range(1, self.count + 1))


def test_a_party_that_opens_rounds_by_itself_is_refused_with_the_fix():
    with pytest.raises(StarfishError, match=r'opening = "auto".*starfish up --opening on_request'):
        preflight.check_opening(admin_pb2.TrainingStatus(opening="auto"))
    preflight.check_opening(admin_pb2.TrainingStatus(opening="on_request"))


def test_flowers_default_federation_against_a_minimum_cohort_of_three_is_refused_at_start():
    with pytest.raises(StarfishError, match=r"samples 2 node\(s\) per round.*at least 3 members.*num-supernodes=3"):
        preflight.check_cohort(nodes=2, fraction_train=1.0, min_train_nodes=2, forgotten=0, k=3)


@given(st.integers(1, 200), st.floats(0.05, 1.0), st.integers(0, 10), st.integers(0, 5), st.integers(2, 20))
def test_the_cohort_check_passes_exactly_when_a_round_can_have_k_members(nodes, fraction, min_train, forgotten, k):
    assume(forgotten < nodes)
    eligible = nodes - forgotten
    per_round = min(max(int(eligible * fraction), min_train), eligible)
    try:
        preflight.check_cohort(nodes, fraction, min_train, forgotten, k)
        refused = False
    except StarfishError as exc:
        refused = True
        assert f"at least {k} members" in str(exc)
        needed = int(str(exc).split("run at least ")[1].split()[0])  # the advice is enough nodes
        assert min(max(int((needed - forgotten) * fraction), min_train), needed - forgotten) >= k
    assert refused == (per_round < k)


def test_waiting_for_nodes_is_bounded_and_names_what_it_waits_for():
    with pytest.raises(StarfishError, match=r"waited 0 s for 5 Flower nodes \(min_available_nodes\); 3 connected"):
        preflight.wait_for_nodes(Nodes(3), 5, timeout_s=0.2, poll_s=0.05)
    assert preflight.wait_for_nodes(Nodes(5), 5, timeout_s=0.2) == 5
