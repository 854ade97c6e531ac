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

Every key: DEALER_SCHEMA below (docs/DEPLOY.md's table is generated from it). An unknown key
or section is refused, naming the nearest known spelling (mpc.toml_schema).
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from mpc.plane.dealer_service import DealerConfig, DealerLimits
from mpc.plane.request_blocks import BLOCK_ELEMENTS
from mpc.plane.tls import TlsFiles
from mpc.toml_schema import Key, Schema, SchemaError, Section, address, dataclass_keys


class DealerConfigError(SchemaError):
    """The dealer configuration is missing a key or holds an invalid value."""


LIMITS = {
    "max_sessions": "sessions served at once; further joins are refused with a reason",
    "join_timeout_s": "how long the first party of a session waits for the second",
    "idle_timeout_s": "a session without a request for this long is closed",
    "max_request_elements": "per tensor of one request (2^25 int64 = 256 MiB); at least the parties' block, 2^24",
    "remember_sessions": "finished session ids kept, so an id can never run twice",
    "handshake_timeout_s": "a connection that has not finished TLS and its hello in this time is closed",
    "max_unauthenticated": "connections still in TLS or hello, all sources together; a new one closes the oldest",
    "max_unauthenticated_per_source": "the same per source address",
}
DEALER_SCHEMA = Schema(
    "dealer",
    (
        Section("", (Key("listen", "", "the one address the dealer binds, `host:port`", required=True),)),
        Section(
            "tls",
            tuple(
                Key(name, "", meaning, required=True)
                for name, meaning in (
                    ("ca", "CA certificate (path relative to this file)"),
                    ("cert", "the dealer's certificate; its common name is the dealer's identity"),
                    ("key", "its private key"),
                )
            ),
        ),
        Section(
            "parties",
            (
                Key("party0", '"party0"', "certificate identity allowed to join as rank 0"),
                Key("party1", '"party1"', "certificate identity allowed to join as rank 1"),
            ),
        ),
        Section("limits", dataclass_keys(DealerLimits, LIMITS)),
        Section(
            "observability",
            (
                Key(
                    "metrics_listen",
                    '""',
                    'Prometheus endpoint `host:port` (loopback or a management network); "" = none',
                ),
                Key(
                    "health_listen",
                    '""',
                    'gRPC health service `host:port` (TLS; loopback or a management network); "" = none',
                ),
            ),
        ),
    ),
)


def split_address(value: Any, key: str) -> tuple[str, int]:
    """ "host:port" (IPv6 as "[::1]:7300") → (host, port)."""
    try:
        return address(value, key)
    except SchemaError as exc:
        raise DealerConfigError(str(exc)) from None


def parse_dealer_config(data: dict[str, Any], base: Path) -> DealerConfig:
    """Validate a parsed dealer.toml (every key known: DEALER_SCHEMA); relative paths are
    resolved against `base`."""
    try:
        DEALER_SCHEMA.check(data)
    except SchemaError as exc:
        raise DealerConfigError(str(exc)) from None
    host, port = split_address(data.get("listen"), "listen")
    tls_t = data.get("tls", {})
    missing = {"ca", "cert", "key"} - set(tls_t)
    if missing:
        raise DealerConfigError(f"missing key(s) {sorted(missing)} in [tls]")
    tls = TlsFiles(*(base / str(tls_t[k]) for k in ("ca", "cert", "key")))
    parties_t = data.get("parties", {})
    parties = (str(parties_t.get("party0", "party0")), str(parties_t.get("party1", "party1")))
    if parties[0] == parties[1]:
        raise DealerConfigError("[parties] party0 and party1 must be different identities")
    try:
        limits = DealerLimits(**data.get("limits", {}))
    except (TypeError, ValueError) as exc:
        raise DealerConfigError(f"bad [limits]: {exc}") from None
    if limits.max_request_elements < BLOCK_ELEMENTS:
        raise DealerConfigError(
            f"[limits] max_request_elements = {limits.max_request_elements} is below the parties' request "
            f"blocks of {BLOCK_ELEMENTS} elements: a job's large requests would be refused"
        )
    obs = data.get("observability", {})
    metrics, health = str(obs.get("metrics_listen", "")), str(obs.get("health_listen", ""))
    for key, value in (("metrics_listen", metrics), ("health_listen", health)):
        if value:
            split_address(value, f"observability.{key}")
    return DealerConfig(host, port, tls, parties, limits, metrics, health)


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
