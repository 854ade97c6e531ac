"""A running pair of party processes (TLS, real gRPC) shared by the service tests.

Clients c0..c4 are registered, c5 is known but never registers; the initial model has
M parameters and round 1 stays open (long deadline; c0 and c3 never upload in these tests).
"""

from __future__ import annotations

import grpc
import numpy as np

from client_sdk.sharing import Half, assemble
from mpc.fixedpoint import random_ring, to_wire
from proto import binding
from proto.starfish.v1 import common_pb2
from server.local import LocalDeployment

M = 64
CLIENTS = [f"c{i}" for i in range(6)]


def client_channel(dep: LocalDeployment, party: int) -> grpc.Channel:
    creds = grpc.ssl_channel_credentials(root_certificates=dep.ca_cert.read_bytes())
    return grpc.secure_channel(dep.address(party), creds, options=[("grpc.max_send_message_length", 16 * 1024 * 1024)])


def metadata(dep: LocalDeployment, client: str, token: str | None = None) -> tuple:
    return (("x-starfish-client", client), ("x-starfish-token", token or dep.creds["clients"][client]))


def bound_header(
    party: int, round_index: int, data: bytes, n: int, model_hash: str, norm: bytes, delta: bytes, m: int = M
) -> common_pb2.UploadHeader:
    """The header of `data` as party p's half of a sharing, with a correct binding (the other
    half is random): what a client sends that builds its uploads by hand."""
    mine = Half(data, b"", norm, delta, binding.new_nonce())
    other = Half(to_wire(random_ring(m)), b"", to_wire(random_ring(1)), to_wire(random_ring(1)), binding.new_nonce())
    halves = (mine, other) if party == 0 else (other, mine)
    return assemble(binding.round_target(round_index), n, model_hash, halves, np.zeros(m)).header(party)
