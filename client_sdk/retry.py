"""How the SDK retries a call: capped exponential back-off with jitter, within a time budget.

The retry contract (`CONTRACT`, the table in docs/SERVICE.md "Retry contract"): every gRPC
status a party answers maps to exactly one behaviour —

* RETRY the same call (same bytes): UNAVAILABLE (down, restarting, stopping, or its store
  cannot be written now), DEADLINE_EXCEEDED (this client's own call timeout: parties never
  send it), CANCELLED (a party stopped while the call was in flight; the SDK never cancels
  a call it waits for), ABORTED, RESOURCE_EXHAUSTED with trailing metadata `x-starfish-busy`
  (admission control, or a full disk);
* NEXT_ROUND: FAILED_PRECONDITION and NOT_FOUND — the round (or task) is not open for this
  call. A round upload waits for the round's outcome and raises RoundClosedError (resubmit
  in the next round); a task answer past its deadline raises TaskExpiredError and is dropped
  at once; other calls raise BadRoundError (NotRegisteredError when the party says so);
* GIVE_UP with a typed error: UNAUTHENTICATED (AuthenticationError), PERMISSION_DENIED
  (NotRegisteredError: erased), ALREADY_EXISTS (ConflictingUploadError), INVALID_ARGUMENT,
  OUT_OF_RANGE and RESOURCE_EXHAUSTED without the busy key (UploadRejectedError), and any
  other status (StarfishError naming it).

The n-th retry waits a uniformly random time in
[d/2, d] with d = min(max_backoff_s, backoff_s·2^(n−1)). A call other than an upload
retries for `budget_s` seconds (and at most `max_attempts` times when set); an upload
retries until its round's (or task's) deadline plus `deadline_grace_s`, and at least
`budget_s` — or for `upload_budget_s` when that is set.
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass

import grpc

BUSY_KEY = "x-starfish-busy"
LATE_TASK = "past its deadline"  #: how a party names a task answer refused as late


class Behaviour(enum.Enum):
    RETRY = "retry the same call with back-off"
    NEXT_ROUND = "not open for this call: resubmit in the next round (a late task answer is dropped)"
    GIVE_UP = "give up with a typed error"


S = grpc.StatusCode
#: status → behaviour; RESOURCE_EXHAUSTED is RETRY only with the busy key (`behaviour`)
CONTRACT: dict[grpc.StatusCode, Behaviour] = {
    S.UNAVAILABLE: Behaviour.RETRY,
    S.DEADLINE_EXCEEDED: Behaviour.RETRY,
    S.CANCELLED: Behaviour.RETRY,
    S.ABORTED: Behaviour.RETRY,
    S.RESOURCE_EXHAUSTED: Behaviour.GIVE_UP,
    S.FAILED_PRECONDITION: Behaviour.NEXT_ROUND,
    S.NOT_FOUND: Behaviour.NEXT_ROUND,
    S.UNAUTHENTICATED: Behaviour.GIVE_UP,
    S.PERMISSION_DENIED: Behaviour.GIVE_UP,
    S.ALREADY_EXISTS: Behaviour.GIVE_UP,
    S.INVALID_ARGUMENT: Behaviour.GIVE_UP,
    S.OUT_OF_RANGE: Behaviour.GIVE_UP,
    S.UNIMPLEMENTED: Behaviour.GIVE_UP,
    S.INTERNAL: Behaviour.GIVE_UP,
    S.UNKNOWN: Behaviour.GIVE_UP,
    S.DATA_LOSS: Behaviour.GIVE_UP,
    S.OK: Behaviour.GIVE_UP,  #: never an error; listed so that every status has a row
}


def behaviour(code: grpc.StatusCode, detail: str = "", busy: bool = False) -> Behaviour:
    """What the SDK does on status `code` (with the busy key `busy`; the party's `detail`)."""
    if code == S.RESOURCE_EXHAUSTED and busy:
        return Behaviour.RETRY
    if code == S.DEADLINE_EXCEEDED and LATE_TASK in detail:  # a party of an earlier version
        return Behaviour.NEXT_ROUND
    return CONTRACT[code]


def is_busy(exc: grpc.RpcError) -> bool:
    trailing = exc.trailing_metadata() if hasattr(exc, "trailing_metadata") else None
    return any(key == BUSY_KEY for key, _ in trailing or ())


def is_transient(exc: grpc.RpcError) -> bool:
    """Whether a failed call may succeed when repeated unchanged (Behaviour.RETRY)."""
    return behaviour(exc.code(), exc.details() or "", is_busy(exc)) is Behaviour.RETRY


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
