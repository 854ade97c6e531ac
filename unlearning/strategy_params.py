"""Typed strategy parameters, parsed by ONE function.

Every strategy declares its parameters as a frozen dataclass deriving `StrategyParams`
(`Strategy.params_type`). `parse_params` turns a request's JSON mapping into it: unknown
names, values of the wrong type and non-finite numbers give an `UnlearningError` naming
the parameter; a field may accept a second spelling (`field(metadata={ALIAS: "B"})`);
then the dataclass's own `check()` tests the ranges. The job service calls it when a
request arrives and `Strategy.run` once per run, so a request is refused before any work.
"""

from __future__ import annotations

import math
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any, TypeVar

from unlearning.errors import UnlearningError

ALIAS = "alias"
"""Dataclass field metadata key: another name the request may use for the field."""

P = TypeVar("P", bound="StrategyParams")


@dataclass(frozen=True)
class StrategyParams:
    """Base of every strategy's parameter dataclass (a strategy without parameters uses it as is)."""

    def check(self) -> None:
        """Raise `UnlearningError` for a value out of its range (types are checked by `parse_params`)."""

    @property
    def as_dict(self) -> dict[str, Any]:
        """JSON-ready copy of the parameters."""
        return asdict(self)


def parse_params(cls: type[P], raw: Mapping[str, Any], strategy: str) -> P:
    """Build the parameter dataclass `cls` from `raw` (see the module docstring)."""
    hints = typing.get_type_hints(cls)
    known = {f.name for f in fields(cls)}
    aliases = {f.metadata[ALIAS]: f.name for f in fields(cls) if ALIAS in f.metadata}
    unknown = sorted(k for k in raw if aliases.get(k, k) not in known)
    if unknown:
        raise UnlearningError(f"{strategy}: unknown parameter(s) {unknown}; known: {sorted(known)}")
    kwargs: dict[str, Any] = {}
    for key, value in raw.items():
        name = aliases.get(key, key)
        kwargs[name] = _coerce(strategy, name, value, hints[name])
    params = cls(**kwargs)
    params.check()
    return params


def _coerce(strategy: str, name: str, value: Any, hint: Any) -> Any:
    allowed = (
        typing.get_args(hint)
        if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union
        else (hint,)
    )
    if value is None and type(None) in allowed:
        return None
    for kind in allowed:
        if kind is bool and isinstance(value, bool):
            return value
        if kind is int and isinstance(value, int) and not isinstance(value, bool):
            return value
        if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            if not math.isfinite(float(value)):
                raise UnlearningError(f"{strategy}: parameter {name!r} must be finite, got {value!r}")
            return float(value)
        if kind is str and isinstance(value, str):
            return value
    names = " or ".join(getattr(k, "__name__", str(k)) for k in allowed)
    raise UnlearningError(f"{strategy}: parameter {name!r} must be {names}, got {value!r}")


def check_range(
    strategy: str,
    name: str,
    value: float | int,
    low: float,
    high: float,
    low_open: bool = False,
    high_open: bool = False,
) -> None:
    """Raise `UnlearningError` unless `value` lies in the interval (bounds as flagged)."""
    below = value <= low if low_open else value < low
    above = value >= high if high_open else value > high
    if below or above:
        lo, hi = ("(" if low_open else "["), (")" if high_open else "]")
        raise UnlearningError(f"{strategy}: parameter {name!r} must be in {lo}{low}, {high}{hi}, got {value!r}")


def check_choice(strategy: str, name: str, value: str, choices: Sequence[str]) -> None:
    """Raise `UnlearningError` unless `value` is one of `choices`."""
    if value not in choices:
        raise UnlearningError(f"{strategy}: parameter {name!r} must be one of {list(choices)}, got {value!r}")
