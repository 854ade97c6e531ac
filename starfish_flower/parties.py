"""Where the parties are and who a Flower node is to them.

A Flower SuperNode is one Starfish client: it needs the two parties' addresses, the CA
certificate that signed them, and its own client id and token. `identity_from_node_config`
reads them from the node's config (a deployed SuperNode: ``flower-supernode --node-config
"starfish-client-id='alice' starfish-token-file='/etc/starfish/alice.token'"``);
`identity_from_credentials` maps a simulated node's ``partition-id`` to a client id and
reads its token from a credentials file (the one `starfish up` writes).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from flwr.app import Context

Identity = Callable[[Context], tuple[str, str]]  #: context → (client id, token)


@dataclass(frozen=True)
class Parties:
    """The two parties' client-facing addresses and the CA certificate (PEM bytes or a path)."""

    party0: str
    party1: str
    ca_cert: bytes | str | Path

    def ca_bytes(self) -> bytes:
        return self.ca_cert if isinstance(self.ca_cert, bytes) else Path(self.ca_cert).read_bytes()


def identity_from_node_config(
    id_key: str = "starfish-client-id", token_file_key: str = "starfish-token-file"
) -> Identity:
    """Client id and token file named in the SuperNode's node config."""

    def resolve(context: Context) -> tuple[str, str]:
        config = context.node_config
        missing = [k for k in (id_key, token_file_key) if k not in config]
        if missing:
            raise KeyError(f"the node config lacks {missing}: this node has no Starfish credential")
        token = Path(str(config[token_file_key])).read_text().strip()
        return str(config[id_key]), token

    return resolve


def identity_from_credentials(path: str | Path, id_format: str = "client{partition-id}") -> Identity:
    """A simulated node's client id from its node config (``id_format`` filled with it) and
    its token from a credentials file ``{"clients": {client id: token}}``."""
    path = Path(path)

    def resolve(context: Context) -> tuple[str, str]:
        client = id_format.format_map(dict(context.node_config))
        tokens = json.loads(path.read_text())["clients"]
        if client not in tokens:
            raise KeyError(f"{path} holds no credential for client {client!r}")
        return client, tokens[client]

    return resolve
