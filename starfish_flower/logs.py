"""Starfish's log lines under Flower.

Flower's processes (the ServerApp, the ClientApps, the simulation) configure one logger,
``flwr``, and forward what it prints to `flwr run --stream` and the SuperLink's log. The
integration's loggers are children of it (``flwr.starfish_flower.…``), so the round,
unlearning and certificate lines appear in Flower's own output next to its round lines,
with its format and level; a logger outside that tree would reach no handler there.
"""

from __future__ import annotations

import logging

FLOWER_LOGGER = "flwr"


def get(module: str) -> logging.Logger:
    """The logger of a `starfish_flower` module, below Flower's logger."""
    return logging.getLogger(f"{FLOWER_LOGGER}.{module}")
