"""The one mechanism behind every process's TOML configuration: a schema of sections and keys.

Each process (party, dealer) declares its file once as a `Schema`: the sections, the keys
of each, their defaults and meanings. The schema does three jobs, so they cannot drift apart:

* `Schema.check(data)` refuses, before anything else is read, a key or section the schema
  does not know, naming it and the nearest known spelling (difflib), e.g.
  "unknown key 'listen_adress' at the top level (did you mean 'peer_address' or 'listen'?)";
* `Schema.markdown()` renders the reference table of the operator guide (generated, never
  hand-written: a test compares the document with it);
* `address(value, key)` validates every "host:port" before anything binds: a port must be
  a number in 1..65535 (a service name such as "http", or 99999, is refused naming the key).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


class SchemaError(ValueError):
    """A configuration file holds a key or section its schema does not know, or a bad address."""


@dataclass(frozen=True)
class Key:
    name: str
    default: str  #: as written in TOML; "" for a required key
    meaning: str
    required: bool = False


@dataclass(frozen=True)
class Section:
    """One TOML table: "" is the top level, "a.b" a sub-table. `free`: any key name is allowed
    (a map such as client id → token digest); `keys` then documents the form of its entries."""

    name: str
    keys: tuple[Key, ...]
    free: bool = False

    def names(self) -> set[str]:
        return {k.name for k in self.keys}

    @property
    def where(self) -> str:
        return "at the top level" if not self.name else f"in [{self.name}]"


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def dataclass_keys(cls: type, meanings: dict[str, str]) -> tuple[Key, ...]:
    """Keys of a table parsed into dataclass `cls`, with the defaults of its fields."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    return tuple(Key(name, _toml(fields[name].default), meaning) for name, meaning in meanings.items())


def nearest(word: str, known: set[str]) -> str:
    """' (did you mean X?)' for the closest known spelling (the two closest, nearest first),
    or '' when none is close."""
    match = difflib.get_close_matches(word, sorted(known), n=2, cutoff=0.6)
    return f" (did you mean {' or '.join(repr(m) for m in match)}?)" if match else ""


@dataclass(frozen=True)
class Schema:
    title: str  #: what the file configures, e.g. "party"
    sections: tuple[Section, ...]

    def section(self, name: str) -> Section:
        for section in self.sections:
            if section.name == name:
                return section
        raise KeyError(name)

    def _children(self, name: str) -> set[str]:
        """Names of the direct sub-tables of table `name`."""
        prefix = f"{name}." if name else ""
        return {
            s.name[len(prefix) :]
            for s in self.sections
            if s.name.startswith(prefix) and s.name and "." not in s.name[len(prefix) :]
        }

    def check(self, data: Mapping[str, Any], name: str = "") -> None:
        """Raise SchemaError on the first key or table the schema does not know (recursively)."""
        section = self.section(name)
        children = self._children(name)
        known = section.names() | children
        for key, value in data.items():
            full = f"{name}.{key}" if name else key
            if key in children:
                if not isinstance(value, Mapping):
                    raise SchemaError(f"[{full}] must be a table, got {value!r}")
                self.check(value, full)
            elif not section.free and key not in section.names():
                what = "section" if isinstance(value, Mapping) else "key"
                raise SchemaError(f"unknown {what} '{key}' {section.where}{nearest(key, known)}")

    def markdown(self) -> str:
        """The reference table of every key (generated into the operator guide)."""
        rows = ["| key | default | meaning |", "| --- | --- | --- |"]
        for section in self.sections:
            for key in section.keys:
                where = f"[{section.name}] " if section.name else ""
                shown = key.name if not section.free else f"{key.name} (any name)"
                default = "required" if key.required else f"`{key.default}`" if key.default else "—"
                rows.append(f"| `{where}{shown}` | {default} | {key.meaning} |")
        return "\n".join(rows) + "\n"


def address(value: object, key: str, port_zero: bool = False) -> tuple[str, int]:
    """ "host:port" (IPv6 as "[::1]:7300") → (host, port), or SchemaError naming `key`."""
    low = 0 if port_zero else 1
    if not isinstance(value, str) or ":" not in value:
        raise SchemaError(f"{key} must be 'host:port', got {value!r}")
    host, _, port = value.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not host or not port.isdigit() or not low <= int(port) <= 65535:
        raise SchemaError(f"{key} must be 'host:port' with a numeric port in {low}..65535, got {value!r}")
    return host, int(port)
