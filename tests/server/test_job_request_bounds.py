"""Bounds of an unlearn request, checked before anything runs (server.jobs.validation,
server.unlearning_policy):

* `json_depth` counts the nesting of any JSON text exactly, brackets inside strings aside,
  without parsing it; `parse_parameters` refuses a text over its size or depth bound with
  INVALID_ARGUMENT's kind and the bound in the message, before `json.loads` recurses;
* every numeric parameter of every strategy that runs as a job has an operator bound, and a
  numeric parameter without one is refused (fail closed); `recovery_rounds = 1000` is
  refused naming the bound and the config key that sets it.
"""

from __future__ import annotations

import json
import typing
from dataclasses import fields

import pytest
from hypothesis import given
from hypothesis import strategies as st

from server.jobs.validation import (
    MAX_PARAMETERS_BYTES,
    MAX_PARAMETERS_DEPTH,
    RequestError,
    json_depth,
    parse_parameters,
    typed_parameters,
)
from server.unlearning_policy import DEFAULT_BOUNDS, PolicyError, UnlearningPolicy, parse_policy
from unlearning import registry

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(alphabet='[]{}"\\ab,:'),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(alphabet='[]{}"\\ab'), inner, max_size=3),
    max_leaves=20,
)


def _depth(value) -> int:
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    return 0


@given(JSON)
def test_json_depth_counts_nesting_exactly_without_parsing(value):
    assert json_depth(json.dumps(value)) == _depth(value)


@pytest.mark.parametrize(
    "text,why",
    [
        ("[" * 100_000, f"at most {MAX_PARAMETERS_BYTES} bytes"),
        ("[" * 5000, f"nests 5000 levels deep; at most {MAX_PARAMETERS_DEPTH} levels"),
        ('{"a": ' + "[" * 900 + "]" * 900 + "}", "nests 901 levels deep"),
        ('{"a": "' + "x" * MAX_PARAMETERS_BYTES + '"}', "bytes long"),
        ("[1, 2", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
    ],
)
def test_parameters_over_their_bounds_are_refused_before_parsing(text, why):
    with pytest.raises(RequestError) as info:
        parse_parameters(text)
    assert info.value.kind == "invalid" and "parameters_json" in str(info.value) and why in str(info.value)


def test_parameters_within_the_bounds_parse():
    assert parse_parameters('{"sigma": 0.5, "B": 2}') == {"sigma": 0.5, "B": 2}
    assert parse_parameters("  ") == {}


def _numeric_fields(strategy: str) -> list[str]:
    params = registry.strategy_class(strategy).params_type
    hints = typing.get_type_hints(params)
    numeric = {int, float, int | None, float | None}
    return [f.name for f in fields(params) if hints[f.name] in numeric]


@pytest.mark.parametrize("strategy", registry.job_names())
def test_every_numeric_job_parameter_has_an_operator_bound(strategy):
    unbounded = sorted(set(_numeric_fields(strategy)) - set(DEFAULT_BOUNDS))
    assert not unbounded, f"{strategy}: no default bound for {unbounded}"


def test_a_numeric_parameter_without_a_bound_is_refused():
    policy = UnlearningPolicy(bounds={"sigma": (0.1, 1.0)})
    with pytest.raises(PolicyError, match=r"recovery_rounds has no operator bound \(\[unlearning.bounds\]"):
        policy.check({"sigma": 0.5, "recovery_rounds": 1})
    policy.check({"sigma": 0.5, "method": "auto", "full_batch_gradients": True, "eta_u": None})


def test_recovery_rounds_beyond_the_bound_is_refused_naming_the_config_key():
    with pytest.raises(RequestError) as info:
        typed_parameters("starfish", {"recovery_rounds": 1000}, parse_policy({}))
    message = str(info.value)
    assert "recovery_rounds = 1000 is outside the operator's bounds [0, 20]" in message
    assert "[unlearning.bounds] recovery_rounds" in message
    raised = parse_policy({"bounds": {"recovery_rounds": [0, 2000]}})
    assert typed_parameters("starfish", {"recovery_rounds": 1000}, raised)[0] == "starfish"
