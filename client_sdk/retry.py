"""How the SDK retries a call: capped exponential back-off with jitter, within a time budget.

Transient failures are UNAVAILABLE and DEADLINE_EXCEEDED (a party is down, restarting or
unreachable) and RESOURCE_EXHAUSTED from a party's admission control (it carries the
trailing metadata `x-starfish-busy`). The n-th retry waits a uniformly random time in
[d/2, d] with d = min(max_backoff_s, backoff_s·2^(n−1)). A call other than an upload
retries for `budget_s` seconds (and at most `max_attempts` times when set); an upload
retries until its round's (or task's) deadline plus `deadline_grace_s`, and at least
`budget_s` — or for `upload_budget_s` when that is set.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import grpc

TRANSIENT = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
BUSY_KEY = "x-starfish-busy"


def is_transient(exc: grpc.RpcError) -> bool:
    """Whether a failed call may succeed when repeated unchanged."""
    code = exc.code()
    if code in TRANSIENT:
        return True
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        trailing = dict(exc.trailing_metadata() or ()) if hasattr(exc, "trailing_metadata") else {}
        return BUSY_KEY in trailing
    return False


@dataclass(frozen=True)
class RetryPolicy:
    backoff_s: float = 0.2  #: first back-off
    max_backoff_s: float = 5.0  #: cap of the back-off
    budget_s: float = 30.0  #: how long a call other than an upload keeps retrying
    max_attempts: int | None = None  #: optional cap on attempts of a call other than an upload
    upload_budget_s: float | None = None  #: None: uploads retry until the round's or task's deadline
    deadline_grace_s: float = 10.0  #: uploads keep retrying this long past the deadline

    def __post_init__(self) -> None:
        if not 0 < self.backoff_s <= self.max_backoff_s:
            raise ValueError(f"need 0 < backoff_s <= max_backoff_s, got {self.backoff_s}, {self.max_backoff_s}")
        if self.budget_s < 0 or self.deadline_grace_s < 0 or (self.max_attempts is not None and self.max_attempts < 1):
            raise ValueError("retry budgets must be non-negative and max_attempts at least 1")

    def delay(self, retry: int) -> float:
        """Wait before retry number `retry` (1, 2, ...): uniform in [d/2, d], d capped."""
        cap = min(self.max_backoff_s, self.backoff_s * 2.0 ** (retry - 1))
        return random.uniform(cap / 2, cap)

    def upload_until(self, deadline: float, now: float) -> float:
        """When an upload stops retrying (unix time)."""
        if self.upload_budget_s is not None:
            return now + self.upload_budget_s
        return max(deadline + self.deadline_grace_s, now + self.budget_s)
