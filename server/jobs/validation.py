"""An unlearn request parsed once, and checked against the party's stored history.

`parse_request` is the one place a request's parameters are read (docs/JOBS.md, "Job
parameters"): strategy name + raw `parameters_json` + targets → the strategy's typed,
validated parameters and their canonical JSON (sorted keys, every default filled in). That
canonical JSON is what the job table stores, what party0 sends party1 in StartJob and what
the job's worker is given; party1 and the worker read it back with `parse_canonical`, which
refuses a copy that is not canonical. `check_history` checks the targets against the stored
history (before a job is queued and again when it starts). Each failure names what is wrong;
nothing is changed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from server.store import Store
from server.unlearning_policy import PolicyError, UnlearningPolicy

if TYPE_CHECKING:
    from unlearning.strategy_params import StrategyParams


class RequestError(ValueError):
    """An unlearn request that cannot be carried out; `kind` selects the RPC status."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind  #: "invalid" | "not_found" | "precondition" | "conflict"


@dataclass(frozen=True)
class CheckedRequest:
    """An unlearn request as `parse_request` returns it."""

    targets: list[str]
    strategy: str  #: the registry name ("" in the request means "starfish")
    params: StrategyParams  #: the strategy's typed parameters, ranges and operator bounds checked
    #: the canonical JSON of `params`: sorted keys, every default filled in; the form the job
    #: table stores (`JobRecord.parameters_json`), party1 receives and the worker is given
    parameters_json: str


MAX_PARAMETERS_BYTES = 16 * 1024  #: longest `parameters_json` of an unlearn request (UTF-8 bytes)
MAX_PARAMETERS_DEPTH = 4  #: deepest nesting of arrays and objects in `parameters_json`
MAX_STATEMENT_BYTES = 4 * 1024 * 1024  #: longest erasure statement party0 asks party1 to sign
MAX_STATEMENT_DEPTH = 16  #: deepest nesting of an erasure statement
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_JSON_BRACKET = re.compile(r"[\[\]{}]")


def json_depth(text: str) -> int:
    """Deepest nesting of arrays and objects in `text`, counted without parsing (strings skipped),
    so that the depth bound is checked before the JSON parser's recursion could overflow."""
    depth = deepest = 0
    for match in _JSON_BRACKET.finditer(_JSON_STRING.sub("", text)):
        depth += 1 if match.group() in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def bounded_json(text: str, what: str, max_bytes: int, max_depth: int) -> Any:
    """Parse JSON `text` of at most `max_bytes` bytes and `max_depth` levels of nesting
    (both checked first); raises `RequestError("invalid")` naming `what` and the bound."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise RequestError("invalid", f"{what} is {size} bytes long; at most {max_bytes} bytes are accepted")
    depth = json_depth(text)
    if depth > max_depth:
        raise RequestError("invalid", f"{what} nests {depth} levels deep; at most {max_depth} levels are accepted")
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise RequestError("invalid", f"{what} is not valid JSON: {exc}") from None


def parse_parameters(text: str) -> dict[str, Any]:
    """Strategy parameters from JSON text (an object of at most `MAX_PARAMETERS_BYTES` bytes
    and `MAX_PARAMETERS_DEPTH` levels; empty text = defaults)."""
    if not text.strip():
        return {}
    value = bounded_json(text, "parameters_json", MAX_PARAMETERS_BYTES, MAX_PARAMETERS_DEPTH)
    if not isinstance(value, dict):
        raise RequestError("invalid", "parameters_json must be a JSON object")
    return value


MIN_COHORT = "min_cohort"  #: the job parameter carrying the release rule's k (docs/PRIVACY.md)


def with_min_cohort(strategy: str, parameters: dict[str, Any], k: int) -> dict[str, Any]:
    """The job's parameters with `min_cohort` ≥ this party's k (`[privacy] min_cohort`).

    Only a strategy whose parameters declare `min_cohort` receives it (others run unchanged):
    absent, it is set to k; a smaller value is refused (a party never runs a job that may
    reveal an aggregate of fewer clients than its own k); a larger one is kept."""
    from unlearning import registry

    name = strategy or "starfish"
    if name not in registry.names():
        return parameters
    if MIN_COHORT not in {f.name for f in fields(registry.strategy_class(name).params_type)}:
        return parameters
    given = parameters.get(MIN_COHORT)
    if given is None:
        return {**parameters, MIN_COHORT: k}
    if isinstance(given, int) and not isinstance(given, bool) and given < k:
        why = f"is below this party's minimum cohort {k} ([privacy] min_cohort)"
        raise RequestError("invalid", f"parameter {MIN_COHORT} = {given} {why}")
    return parameters


def typed_parameters(
    strategy: str, raw: Mapping[str, Any], policy: UnlearningPolicy | None = None
) -> tuple[str, StrategyParams]:
    """The strategy name and its typed parameters, after checking it runs as a 2PC job, `raw`
    parses (`unlearning.strategy_params.parse_params`: unknown names, types, ranges, each refusal
    naming the parameter) and the result lies within the operator's bounds (`policy`,
    server.unlearning_policy).

    The algorithm (and torch) is imported here, at the first request, not at party start.
    """
    from unlearning import registry
    from unlearning.strategy import UnlearningError

    name = strategy or "starfish"
    if name not in registry.names() or not registry.strategy_class(name).runs_as_job():
        why = "unknown" if name not in registry.names() else "not available as a 2PC job"
        raise RequestError("invalid", f"strategy {name!r} is {why}; jobs run {registry.job_names()}")
    try:
        typed = registry.strategy_class(name).parse_params(raw)
    except UnlearningError as exc:
        raise RequestError("invalid", f"bad {name} parameters: {exc}") from None
    if policy is not None:
        try:
            policy.check(typed.as_dict)
        except PolicyError as exc:
            raise RequestError("invalid", str(exc)) from None
    return name, typed


def parse_request(
    targets: list[str],
    strategy: str,
    parameters_json: str,
    policy: UnlearningPolicy | None = None,
    min_cohort: int | None = None,
    defaults: Mapping[str, Any] | None = None,
) -> CheckedRequest:
    """The one parse of an unlearn request (module docstring): targets given and distinct,
    `parameters_json` a bounded JSON object over `defaults` (the operator's parameters,
    `[unlearning.parameters]`), with `min_cohort` (this party's k) carrying
    `with_min_cohort`'s value, typed and checked by `typed_parameters`."""
    if not targets:
        raise RequestError("invalid", "no target client given")
    if len(set(targets)) != len(targets):
        raise RequestError("invalid", f"duplicate target(s) in {targets}")
    raw = {**(defaults or {}), **parse_parameters(parameters_json)}
    if min_cohort is not None:
        raw = with_min_cohort(strategy, raw, min_cohort)
    name, typed = typed_parameters(strategy, raw, policy)
    return CheckedRequest(list(targets), name, typed, json.dumps(typed.as_dict, sort_keys=True))


def parse_canonical(
    targets: list[str],
    strategy: str,
    parameters_json: str,
    policy: UnlearningPolicy | None = None,
    min_cohort: int | None = None,
) -> CheckedRequest:
    """`parse_request` of a copy that must already be canonical (party1's StartJob, the
    worker's spec): one whose text differs from its own canonical form is refused."""
    checked = parse_request(targets, strategy, parameters_json, policy, min_cohort)
    if checked.parameters_json != parameters_json:
        raise RequestError(
            "invalid", f"parameters_json is not canonical (sorted keys, defaults filled): {checked.parameters_json}"
        )
    return checked


def history_clients(store: Store, last_round: int) -> set[str]:
    """Clients with an agreed membership in some stored round 1..last_round, minus erased ones."""
    seen: set[str] = set()
    for i in range(1, last_round + 1):
        seen.update(store.round_members(i))
    return {c for c in seen if not store.is_erased(c)}


def check_history(store: Store, known_clients: set[str], targets: list[str]) -> None:
    """Check a parsed request's targets against the stored history (the inputs of Algorithm 4)."""
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
