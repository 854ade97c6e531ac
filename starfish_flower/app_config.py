"""Where the parties are and who is asking, read from a Flower app's configuration when the
app runs (never at import: `flwr run` imports the app before any config exists).

Run config (`[tool.flwr.app.config]`, `flwr run --run-config`), same for every process:

* ``starfish-dir``: a deployment directory made by `starfish up` — the three keys below
  default to what it holds (``credentials.json``: ports and tokens; ``certs/ca.pem``);
* ``starfish-party0``, ``starfish-party1``: the parties' client-facing addresses;
* ``starfish-admin``: party0's admin API (its `admin_listen`; the ServerApp only);
* ``starfish-ca-cert``: the CA certificate that signed them (PEM file);
* ``starfish-credentials``: a credentials file ``{"admin_token": …, "clients": {id: token}}``
  (the ServerApp reads the admin token; a simulated node reads its client token, client id
  ``client{partition-id}``).

Node config (`flower-supernode --node-config`), one SuperNode = one Starfish client; any
of the keys above may also be set here (a node-local CA path), and a node's value wins:

* ``starfish-client-id``, ``starfish-token-file``: this node's credential.

Paths must be absolute: Flower runs the app from its own installed copy, not from the
directory `flwr run` was called in.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flwr.app import Context

from client_sdk.admin import AdminClient
from starfish_flower.parties import Parties

DIR = "starfish-dir"
PARTY0 = "starfish-party0"
PARTY1 = "starfish-party1"
ADMIN = "starfish-admin"
CA_CERT = "starfish-ca-cert"
CREDENTIALS = "starfish-credentials"
CLIENT_ID = "starfish-client-id"
TOKEN_FILE = "starfish-token-file"


class ConfigError(ValueError):
    """A missing or unusable Starfish key in the run or node config."""


def _path(config: Mapping[str, Any], key: str) -> Path:
    path = Path(str(config[key])).expanduser()
    if not path.is_absolute():
        raise ConfigError(f"{key} = {str(config[key])!r} must be an absolute path (Flower runs the app elsewhere)")
    if not path.exists():
        raise ConfigError(f"{key} = {str(path)!r} does not exist")
    return path


def _set(config: Mapping[str, Any], key: str) -> bool:
    return str(config.get(key, "")) != ""


@dataclass(frozen=True)
class StarfishConfig:
    """The Starfish keys of a Flower run (see module doc)."""

    party0: str
    party1: str
    ca_cert: Path
    credentials: Path | None
    admin_address: str = ""  #: party0's admin API (`admin_listen`)

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any]) -> StarfishConfig:
        config = dict(config)
        if _set(config, DIR):
            root = _path(config, DIR)
            ports = json.loads((root / "credentials.json").read_text())["ports"]
            found = {
                PARTY0: f"127.0.0.1:{ports['client0']}",
                PARTY1: f"127.0.0.1:{ports['client1']}",
                ADMIN: f"127.0.0.1:{ports['admin0']}",
                CA_CERT: str(root / "certs" / "ca.pem"),
                CREDENTIALS: str(root / "credentials.json"),
            }
            config = {**config, **{k: v for k, v in found.items() if not _set(config, k)}}  # set keys win
        missing = [k for k in (PARTY0, PARTY1, CA_CERT) if not _set(config, k)]
        if missing:
            raise ConfigError(f"the run config sets neither {DIR} nor {missing}: no Starfish parties to talk to")
        credentials = _path(config, CREDENTIALS) if _set(config, CREDENTIALS) else None
        admin = str(config.get(ADMIN, ""))
        return cls(str(config[PARTY0]), str(config[PARTY1]), _path(config, CA_CERT), credentials, admin)

    @classmethod
    def from_context(cls, context: Context) -> StarfishConfig:
        """The run config with the node config's values over it."""
        node = {k: v for k, v in context.node_config.items() if _set(context.node_config, k)}
        return cls.from_mapping({**context.run_config, **node})

    def parties(self) -> Parties:
        return Parties(self.party0, self.party1, self.ca_cert)

    def admin(self, timeout_s: float = 60.0) -> AdminClient:
        """The admin client of party0 (the admin token from the credentials file)."""
        if self.credentials is None:
            raise ConfigError(f"the ServerApp needs {CREDENTIALS} (or {DIR}): the admin token is in it")
        token = json.loads(self.credentials.read_text()).get("admin_token")
        if not token:
            raise ConfigError(f"{self.credentials} holds no admin token")
        if not self.admin_address:
            raise ConfigError(f"the ServerApp needs {ADMIN} (or {DIR}): party0's admin API address")
        return AdminClient(self.admin_address, token, self.ca_cert, timeout_s=timeout_s)


def identity(context: Context, id_format: str = "client{partition-id}") -> tuple[str, str]:
    """This node's (client id, token): from the node config's ``starfish-client-id`` and
    ``starfish-token-file`` (a SuperNode), else from the credentials file with the client id
    ``id_format`` filled from the node config (a simulated node's ``partition-id``)."""
    node = context.node_config
    if _set(node, CLIENT_ID) or _set(node, TOKEN_FILE):
        if not (_set(node, CLIENT_ID) and _set(node, TOKEN_FILE)):
            raise ConfigError(f"the node config must set both {CLIENT_ID} and {TOKEN_FILE}")
        return str(node[CLIENT_ID]), _path(node, TOKEN_FILE).read_text().strip()
    credentials = StarfishConfig.from_context(context).credentials
    if credentials is None:
        raise ConfigError(f"this node has no Starfish credential: set {CLIENT_ID} and {TOKEN_FILE} in its node config")
    client = id_format.format_map(dict(node))
    tokens = json.loads(credentials.read_text())["clients"]
    if client not in tokens:
        raise ConfigError(f"{credentials} holds no credential for client {client!r}")
    return client, tokens[client]
