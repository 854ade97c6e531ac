"""TLS channels to party0 and party1 that several `Client` objects of one process can share.

A channel authenticates the party (its certificate must chain to the deployment's CA) and
carries no client identity: every call names its client with that client's own credential
(metadata ``x-starfish-client`` / ``x-starfish-token``), which the party checks on every
call. A process acting for many clients one after another (a Flower simulation actor, a
SuperNode) can therefore open the two TLS connections once and let each client's calls
use them: no handshake per client and round, and the HTTP/2 flow-control window a long
upload needs is already open. Sharing a channel lets no client act as another: a client
never sees another's token.
"""

from __future__ import annotations

import grpc

from proto.channel_options import reconnect_options
from proto.starfish.v1 import client_pb2_grpc

MAX_MESSAGE_BYTES = 4 * 1024 * 1024


class PartyChannels:
    """One TLS channel (and stub) per party; `close` ends both."""

    def __init__(self, party0: str, party1: str, ca_cert: bytes, max_message_bytes: int = MAX_MESSAGE_BYTES):
        self.addresses = (party0, party1)
        self.ca_cert = ca_cert
        opts = [
            ("grpc.max_send_message_length", max_message_bytes),
            ("grpc.max_receive_message_length", max_message_bytes),
            *reconnect_options(),
        ]
        self.channels = [
            grpc.secure_channel(a, grpc.ssl_channel_credentials(root_certificates=ca_cert), options=opts)
            for a in self.addresses
        ]
        self.stubs = [client_pb2_grpc.ClientServiceStub(ch) for ch in self.channels]

    def serves(self, party0: str, party1: str, ca_cert: bytes) -> bool:
        """Whether these channels lead to these two parties under this CA."""
        return self.addresses == (party0, party1) and self.ca_cert == ca_cert

    def close(self) -> None:
        for ch in self.channels:
            ch.close()
