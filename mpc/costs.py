"""Cost accounting: wall time, bytes and rounds per named protocol step.

A `CostLedger` accumulates, per step name, wall-clock seconds and the growth of the
communication counters a backend reports (online bytes/rounds between the parties,
offline bytes from the dealer). Steps may nest; each records its own totals.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field


@dataclass
class StepCost:
    """Totals for one named step."""

    calls: int = 0
    seconds: float = 0.0
    online_bytes: int = 0
    online_rounds: int = 0
    offline_bytes: int = 0
    offline_seconds: float = 0.0

    def add(self, other: StepCost) -> None:
        self.calls += other.calls
        self.seconds += other.seconds
        self.online_bytes += other.online_bytes
        self.online_rounds += other.online_rounds
        self.offline_bytes += other.offline_bytes
        self.offline_seconds += other.offline_seconds


@dataclass
class CostLedger:
    """Per-step costs of one party's run."""

    steps: dict[str, StepCost] = field(default_factory=dict)

    @contextmanager
    def step(self, name: str, snapshot: Callable[[], dict[str, int | float]]) -> Iterator[None]:
        """Measure the enclosed block and add it to step `name`."""
        before = snapshot()
        start = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - start
            after = snapshot()
            cost = StepCost(calls=1, seconds=elapsed)
            for key in ("online_bytes", "online_rounds", "offline_bytes", "offline_seconds"):
                setattr(cost, key, type(getattr(cost, key))(after.get(key, 0) - before.get(key, 0)))
            self.steps.setdefault(name, StepCost()).add(cost)

    def to_dict(self) -> dict[str, dict[str, float | int]]:
        """JSON-ready per-step totals."""
        return {name: asdict(cost) for name, cost in self.steps.items()}

    def merge(self, other: CostLedger) -> None:
        """Add another ledger's totals into this one (e.g. after a resumed job)."""
        for name, cost in other.steps.items():
            self.steps.setdefault(name, StepCost()).add(cost)
