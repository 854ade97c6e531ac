"""A running pair of party processes (TLS, real gRPC) shared by the service tests.

Clients c0..c4 are registered, c5 is known but never registers; the initial model has
M parameters and round 1 stays open (long deadline, c3/c4 never upload in these tests).
"""

from __future__ import annotations

import grpc

from client_sdk.wire import chunks, sha256_hex
from mpc.fixedpoint import random_ring, to_wire
from proto.starfish.v1 import client_pb2, client_pb2_grpc, common_pb2
from server.local import LocalDeployment

M = 64
CLIENTS = [f"c{i}" for i in range(6)]


def client_channel(dep: LocalDeployment, party: int) -> grpc.Channel:
    creds = grpc.ssl_channel_credentials(root_certificates=dep.ca_cert.read_bytes())
    return grpc.secure_channel(dep.address(party), creds, options=[("grpc.max_send_message_length", 16 * 1024 * 1024)])


def metadata(dep: LocalDeployment, client: str, token: str | None = None) -> tuple:
    return (("x-starfish-client", client), ("x-starfish-token", token or dep.creds["clients"][client]))


def round_view(dep):
    with client_channel(dep, 0) as ch:
        return client_pb2_grpc.ClientServiceStub(ch).GetRound(
            client_pb2.GetRoundRequest(), metadata=metadata(dep, "c0")
        )


def ring_scalar() -> common_pb2.Tensor:
    return common_pb2.Tensor(shape=[1], dtype="int64", data=to_wire(random_ring(1)))


def raw_upload(
    dep, party: int, client: str, data: bytes | None = None, token: str | None = None, chunk: int = 65536, **header_kw
):
    """Send one hand-built UploadShares stream; returns the ack or raises grpc.RpcError."""
    state = round_view(dep)
    data = to_wire(random_ring(M)) if data is None else data
    fields = dict(
        round=state.round,
        n_samples=10,
        shape=[M],
        dtype="int64",
        norm_share=ring_scalar(),
        delta_share=ring_scalar(),
        content_sha256=sha256_hex(data),
        model_hash=state.model_hash,
    )
    fields.update(header_kw)
    msgs = [common_pb2.UploadChunk(header=common_pb2.UploadHeader(**fields))]
    msgs += [common_pb2.UploadChunk(data=p) for p in chunks(data, chunk)]
    with client_channel(dep, party) as ch:
        return client_pb2_grpc.ClientServiceStub(ch).UploadShares(
            iter(msgs), metadata=metadata(dep, client, token), timeout=20
        )
