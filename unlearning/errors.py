"""The error every unlearning strategy raises for a request it cannot carry out."""

from __future__ import annotations


class UnlearningError(ValueError):
    """An unlearning request that cannot be carried out (bad targets or parameters)."""
