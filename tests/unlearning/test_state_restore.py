"""One `Strategy.restore_state` for every strategy: the state it names rebuilt from a
checkpoint's three parts, or a clear `UnlearningError`."""

from __future__ import annotations

import pytest

from unlearning import registry
from unlearning.errors import UnlearningError

RESUMABLE = [n for n in registry.names() if registry.strategy_class(n).resumable()]
OTHERS = [n for n in registry.names() if not registry.strategy_class(n).resumable()]


def test_the_resumable_strategies_are_the_three_of_the_jobs() -> None:
    assert set(RESUMABLE) >= {"starfish", "fedrecover", "crab"}
    assert OTHERS, "some strategy does not resume"


@pytest.mark.parametrize("name", RESUMABLE)
def test_a_resumable_strategy_names_its_state_and_refuses_missing_parts(name: str) -> None:
    cls = registry.strategy_class(name)
    assert cls.state_type is not None
    public = {"version": 2} if name in ("starfish", "random") else {"version": 1, "strategy": name}
    with pytest.raises(UnlearningError, match=r"incomplete \w+ state: missing '\w+'"):
        cls.restore_state(public, {}, {})


@pytest.mark.parametrize("name", OTHERS)
def test_a_strategy_without_state_does_not_resume(name: str) -> None:
    cls = registry.strategy_class(name)
    assert cls.state_type is None
    with pytest.raises(UnlearningError, match="does not support resuming"):
        cls.restore_state({}, {}, {})
