"""Shared fixtures for the unlearning tests (helpers live in synthetic_fl.py)."""

from __future__ import annotations

import pytest

from synthetic_fl import LogRegSetup, make_logreg_setup


@pytest.fixture
def logreg_fl() -> LogRegSetup:
    """Five clients (c0 label-flipped), 8 stored FedAvg rounds at lr 0.5, plain backend."""
    return make_logreg_setup()
