"""Checks of an unlearn request against the party's stored history (before it is queued
and again when it starts). Each failure names what is wrong; nothing is changed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from server.store import Store

#: strategies the job runner can run under 2PC: Algorithm 4 with a resumable `StarfishState`
#: (public and secret parts), i.e. Starfish and its random-round-selection baseline
JOB_STRATEGIES = ("starfish", "random")


class RequestError(ValueError):
    """An unlearn request that cannot be carried out; `kind` selects the RPC status."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind  #: "invalid" | "not_found" | "precondition"


@dataclass(frozen=True)
class CheckedRequest:
    targets: list[str]
    strategy: str
    parameters: dict[str, Any]


def parse_parameters(text: str) -> dict[str, Any]:
    """Strategy parameters from JSON text (an object; empty text = defaults)."""
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RequestError("invalid", f"parameters are not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise RequestError("invalid", "parameters must be a JSON object")
    return value


def check_strategy(strategy: str, parameters: dict[str, Any]) -> str:
    """The strategy name, after checking it runs as a 2PC job and its parameters parse.

    The algorithm (and torch) is imported here, at the first request, not at party start.
    """
    from unlearning import registry
    from unlearning.starfish.strategy import StarfishStrategy
    from unlearning.strategy import UnlearnContext, UnlearningError

    name = strategy or "starfish"
    if name not in JOB_STRATEGIES:
        known = registry.names()
        why = "unknown" if name not in known else "not available as a 2PC job"
        raise RequestError("invalid", f"strategy {name!r} is {why}; jobs run {list(JOB_STRATEGIES)}")
    strategy = registry.create(name)
    if strategy.requires_plaintext or not isinstance(strategy, StarfishStrategy):
        raise RequestError("invalid", f"strategy {name!r} cannot run as a 2PC job")
    try:  # the strategy's own parameter parsing reads nothing but the parameters
        strategy.params(
            UnlearnContext(
                backend=None,
                history=None,
                oracle=None,
                targets=(),  # type: ignore[arg-type]
                params=parameters,
            )
        )
    except (UnlearningError, TypeError) as exc:
        raise RequestError("invalid", f"bad {name} parameters: {exc}") from None
    return name


def history_clients(store: Store, last_round: int) -> set[str]:
    """Clients with an agreed membership in some stored round 1..last_round, minus erased ones."""
    seen: set[str] = set()
    for i in range(1, last_round + 1):
        seen.update(store.round_members(i))
    return {c for c in seen if not store.is_erased(c)}


def check_request(
    store: Store, known_clients: set[str], targets: list[str], strategy: str, parameters: dict[str, Any]
) -> CheckedRequest:
    """Validate targets and parameters against the stored history (DESIGN §6 inputs)."""
    if not targets:
        raise RequestError("invalid", "no target client given")
    if len(set(targets)) != len(targets):
        raise RequestError("invalid", f"duplicate target(s) in {targets}")
    name = check_strategy(strategy, parameters)
    unknown = sorted(t for t in targets if t not in known_clients)
    if unknown:
        raise RequestError("not_found", f"unknown client(s) {unknown}")
    erased = sorted(t for t in targets if store.is_erased(t))
    if erased:
        raise RequestError("precondition", f"client(s) {erased} were already erased")
    latest = store.latest_committed()
    if latest < 1:
        raise RequestError("precondition", "no training round is stored yet: nothing to unlearn")
    present = history_clients(store, latest)
    absent = sorted(t for t in targets if t not in present)
    if absent:
        raise RequestError("precondition", f"client(s) {absent} took part in no stored round")
    if not present - set(targets):
        raise RequestError(
            "precondition", f"{sorted(targets)} would leave no remaining client: a target is the only client"
        )
    return CheckedRequest(list(targets), name, parameters)
