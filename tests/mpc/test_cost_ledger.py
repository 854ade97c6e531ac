"""`Primitives.own_ledger`: a run's costs counted alone and added to the backend's cumulative ledger."""

from __future__ import annotations

import pytest

from mpc.plain_backend import PlainBackend


def _calls(ledger) -> dict[str, int]:
    return {name: step.calls for name, step in ledger.steps.items()}


def test_own_ledger_counts_the_block_alone_and_adds_it_to_the_backend():
    backend = PlainBackend()
    outer = backend.ledger
    with backend.step("before"):
        pass
    with backend.own_ledger() as run:
        assert backend.ledger is run
        with backend.step("inner"):
            pass
    assert _calls(run) == {"inner": 1}
    assert backend.ledger is outer and _calls(outer) == {"before": 1, "inner": 1}


def test_own_ledger_restores_and_merges_when_the_block_fails():
    backend = PlainBackend()
    outer = backend.ledger
    with pytest.raises(RuntimeError), backend.own_ledger():
        with backend.step("failed"):
            pass
        raise RuntimeError("the run broke")
    assert backend.ledger is outer and _calls(outer) == {"failed": 1}
