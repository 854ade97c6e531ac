"""Shared fixtures for the unlearning tests (helpers live in synthetic_fl.py)."""

from __future__ import annotations

import pytest

from helpers.synthetic_fl import LogRegSetup, fixed_noise, make_logreg_setup


@pytest.fixture
def logreg_fl() -> LogRegSetup:
    """Five clients (c0 label-flipped), 8 stored FedAvg rounds at lr 0.5, plain backend."""
    return make_logreg_setup()


@pytest.fixture(autouse=True)
def fixed_anchor_noise(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests compare runs with one another (a resumed run, the same seed twice, two
    backends): the anchored reveal's secret Gaussian is one fixed draw here
    (unlearning/starfish/anchor_noise.py; tests/privacy attack the secret default)."""
    monkeypatch.setattr("unlearning.starfish.driver.secret_gaussian", fixed_noise)
