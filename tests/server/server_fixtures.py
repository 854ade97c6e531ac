"""A running pair of party processes (TLS, real gRPC) shared by the service tests.

Clients c0..c4 are registered, c5 is known but never registers; the initial model has
M parameters and round 1 stays open (long deadline, c3/c4 never upload in these tests).
"""

from __future__ import annotations

import grpc

from server.local import LocalDeployment

M = 64
CLIENTS = [f"c{i}" for i in range(6)]


def client_channel(dep: LocalDeployment, party: int) -> grpc.Channel:
    creds = grpc.ssl_channel_credentials(root_certificates=dep.ca_cert.read_bytes())
    return grpc.secure_channel(dep.address(party), creds, options=[("grpc.max_send_message_length", 16 * 1024 * 1024)])


def metadata(dep: LocalDeployment, client: str, token: str | None = None) -> tuple:
    return (("x-starfish-client", client), ("x-starfish-token", token or dep.creds["clients"][client]))
