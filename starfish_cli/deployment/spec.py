"""The deployment description: the three operators' addresses and ports, written once.

A TOML file with tables `[party0]`, `[party1]` (address, client_port, peer_port,
metrics_port; party0 also mpc_port and admin_port, its admin API), `[dealer]` (address, port, metrics_port, health_port)
and `[admin]`
(ports: the administrative ports every host's firewall keeps open, e.g. [22]; sources: the
addresses allowed to reach them, empty for any). Unknown keys and missing values are
refused with the key's name, so a typo cannot render a deployment with a default address.
"""

from __future__ import annotations

import ipaddress
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROLES = ("party0", "party1", "dealer")
_KEYS = {
    "party0": {"address", "client_port", "peer_port", "mpc_port", "metrics_port", "admin_port"},
    "party1": {"address", "client_port", "peer_port", "metrics_port"},
    "dealer": {"address", "port", "metrics_port", "health_port"},
}


class SpecError(ValueError):
    """The deployment description is invalid; the message names the key."""


@dataclass(frozen=True)
class Operator:
    """One operator's host address and ports (those its role has; the others are 0)."""

    address: str
    client_port: int = 0
    peer_port: int = 0
    mpc_port: int = 0
    metrics_port: int = 0
    port: int = 0
    health_port: int = 0  #: the dealer's gRPC health service, on loopback
    admin_port: int = 0  #: party0's admin API (its own listener, open to `[admin] sources` only)

    def at(self, port: int) -> str:
        return f"{self.address}:{port}"


@dataclass(frozen=True)
class Spec:
    party0: Operator
    party1: Operator
    dealer: Operator
    admin_ports: tuple[int, ...]
    admin_sources: tuple[str, ...]

    def operator(self, role: str) -> Operator:
        if role not in ROLES:
            raise SpecError(f"unknown role {role!r}: one of {', '.join(ROLES)}")
        return getattr(self, role)


def _port(table: str, key: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 65535:
        raise SpecError(f"[{table}] {key} must be a port number (1-65535), not {value!r}")
    return value


def _address(where: str, value: object) -> str:
    try:
        return str(ipaddress.ip_address(str(value)))
    except ValueError:
        raise SpecError(f"{where} must be an IP address, not {value!r}") from None


def _operator(data: dict, role: str) -> Operator:
    table = data.get(role)
    if not isinstance(table, dict):
        raise SpecError(f"missing table [{role}]")
    unknown, missing = set(table) - _KEYS[role], _KEYS[role] - set(table)
    if unknown or missing:
        raise SpecError(f"[{role}]: unknown key(s) {sorted(unknown)}, missing key(s) {sorted(missing)}")
    ports = {k: _port(role, k, v) for k, v in table.items() if k != "address"}
    return Operator(address=_address(f"[{role}] address", table["address"]), **ports)


def parse(data: dict) -> Spec:
    unknown = set(data) - {*ROLES, "admin"}
    if unknown:
        raise SpecError(f"unknown table(s) {sorted(unknown)}")
    admin = data.get("admin", {})
    if set(admin) - {"ports", "sources"}:
        raise SpecError(f"[admin]: unknown key(s) {sorted(set(admin) - {'ports', 'sources'})}")
    ports = tuple(_port("admin", "ports", p) for p in admin.get("ports", []))
    if not ports:
        raise SpecError("[admin] ports is empty: the firewall would lock the operators out of their hosts")
    sources = tuple(_address("[admin] sources", s) for s in admin.get("sources", []))
    spec = Spec(*(_operator(data, r) for r in ROLES), admin_ports=ports, admin_sources=sources)
    _distinct(spec)
    return spec


def _distinct(spec: Spec) -> None:
    seen: dict[str, str] = {}
    for role in ROLES:
        op = spec.operator(role)
        for key in sorted(_KEYS[role] - {"address"}):
            where = op.at(getattr(op, key))
            if key in ("metrics_port", "health_port"):
                where = f"127.0.0.1:{getattr(op, key)}"
            if where in seen or getattr(op, key) in spec.admin_ports:
                raise SpecError(f"[{role}] {key}: {where} is also {seen.get(where, 'an [admin] port')}")
            seen[where] = f"[{role}] {key}"


def load(path: Path) -> Spec:
    try:
        with open(path, "rb") as fh:
            return parse(tomllib.load(fh))
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{path}: {exc}") from None
