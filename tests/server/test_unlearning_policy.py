"""The unlearning-parameter policy: requests outside the operator's bounds are refused with a
message naming the parameter (its config is checked in test_server_config.py)."""

from __future__ import annotations

import pytest

from server.jobs.validation import RequestError, typed_parameters
from server.unlearning_policy import PolicyError, UnlearningPolicy, parse_policy


@pytest.mark.parametrize(
    "parameters, message",
    [
        ({"eta_u": 10.0, "sigma": 1.0}, "eta_u = 10 is outside the operator's bounds"),
        ({"eta": 5.0}, "eta_u = 5 is outside"),  # an alias does not escape the bound
        ({"B": 64}, "buffer_size = 64 is outside"),
        ({"sigma": float("nan")}, "sigma"),
        ({"eta_u": float("inf")}, "eta_u"),
        ({"seed": -1}, "seed = -1 is outside"),
    ],
)
def test_out_of_bounds_requests_are_invalid(parameters, message):
    policy = parse_policy({})
    strategy = "random" if "seed" in parameters else "starfish"
    with pytest.raises(RequestError, match=message) as err:
        typed_parameters(strategy, parameters, policy)
    assert err.value.kind == "invalid"


def test_requests_within_bounds_pass():
    policy = parse_policy({"bounds": {"eta_u": [0.001, 0.5]}})
    assert typed_parameters("starfish", {"eta_u": 0.5, "sigma": 1.0, "B": 2}, policy)[0] == "starfish"
    assert typed_parameters("starfish", {}, policy)[0] == "starfish"  # η_u = None: each round's η_l


def test_policy_check_names_the_bound():
    with pytest.raises(PolicyError, match=r"\[0.1, 0.2\]"):
        UnlearningPolicy(bounds={"sigma": (0.1, 0.2)}).check({"sigma": 0.3})


def test_another_strategy_gets_only_the_operator_parameters_it_declares():
    policy = UnlearningPolicy({"beta": 0.25, "B": 3, "anchor_noise": False})
    assert policy.for_strategy("") == policy.for_strategy("starfish") == {"beta": 0.25, "B": 3, "anchor_noise": False}
    # the shared L-BFGS buffer and the anchored noise's switch; β is Starfish's
    assert policy.for_strategy("fedrecover") == {"B": 3, "anchor_noise": False}
    assert policy.for_strategy("crab") == {"anchor_noise": False}
    assert policy.for_strategy("no-such-strategy") == {}
