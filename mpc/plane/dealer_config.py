"""The dealer's configuration file (`starfish dealer --config dealer.toml`), read with tomllib.

    listen = "10.0.0.3:7300"          # the one address the dealer binds
    [tls]                              # paths relative to this file
    ca = "certs/ca.pem"
    cert = "certs/dealer.pem"          # its common name is the dealer's identity
    key = "certs/dealer.key"
    [parties]                          # certificate identities allowed to join, by rank
    party0 = "party0"
    party1 = "party1"
    [limits]                           # optional, see DealerLimits
    max_sessions = 16
    join_timeout_s = 120
    idle_timeout_s = 600
    max_request_elements = 33554432
    remember_sessions = 4096

Every key is documented in docs/DEPLOY.md. Unknown keys are refused.
"""

from __future__ import annotations

import tomllib
from dataclasses import fields
from pathlib import Path
from typing import Any

from mpc.plane.dealer_service import DealerConfig, DealerLimits
from mpc.plane.tls import TlsFiles


class DealerConfigError(ValueError):
    """The dealer configuration is missing a key or holds an invalid value."""


def split_address(value: Any, key: str) -> tuple[str, int]:
    """ "host:port" (IPv6 as "[::1]:7300") → (host, port)."""
    if not isinstance(value, str) or ":" not in value:
        raise DealerConfigError(f"{key} must be 'host:port', got {value!r}")
    host, _, port = value.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise DealerConfigError(f"{key} must be 'host:port' with a port in 1..65535, got {value!r}")
    return host, int(port)


def _table(data: dict[str, Any], name: str, known: set[str]) -> dict[str, Any]:
    table = data.get(name, {})
    if not isinstance(table, dict):
        raise DealerConfigError(f"[{name}] must be a table")
    unknown = set(table) - known
    if unknown:
        raise DealerConfigError(f"unknown key(s) {sorted(unknown)} in [{name}]")
    return table


def parse_dealer_config(data: dict[str, Any], base: Path) -> DealerConfig:
    """Validate a parsed dealer.toml; relative paths are resolved against `base`."""
    unknown = set(data) - {"listen", "tls", "parties", "limits", "observability"}
    if unknown:
        raise DealerConfigError(f"unknown key(s) {sorted(unknown)} at the top level")
    host, port = split_address(data.get("listen"), "listen")
    tls_t = _table(data, "tls", {"ca", "cert", "key"})
    missing = {"ca", "cert", "key"} - set(tls_t)
    if missing:
        raise DealerConfigError(f"missing key(s) {sorted(missing)} in [tls]")
    tls = TlsFiles(*(base / str(tls_t[k]) for k in ("ca", "cert", "key")))
    parties_t = _table(data, "parties", {"party0", "party1"})
    parties = (str(parties_t.get("party0", "party0")), str(parties_t.get("party1", "party1")))
    if parties[0] == parties[1]:
        raise DealerConfigError("[parties] party0 and party1 must be different identities")
    limits_t = _table(data, "limits", {f.name for f in fields(DealerLimits)})
    try:
        limits = DealerLimits(**limits_t)
    except (TypeError, ValueError) as exc:
        raise DealerConfigError(f"bad [limits]: {exc}") from None
    metrics = str(_table(data, "observability", {"metrics_listen"}).get("metrics_listen", ""))
    if metrics:
        split_address(metrics, "observability.metrics_listen")
    return DealerConfig(host, port, tls, parties, limits, metrics)


def load_dealer_config(path: str | Path) -> DealerConfig:
    p = Path(path)
    try:
        with p.open("rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise DealerConfigError(f"config file {p} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise DealerConfigError(f"config file {p} is not valid TOML: {exc}") from None
    return parse_dealer_config(data, p.resolve().parent)
