"""A running pair of party processes (TLS, real gRPC) shared by the service tests.

Clients c0..c4 are registered, c5 is known but never registers; the initial model has
M parameters and round 1 stays open (long deadline; c0 and c3 never upload in these tests).
"""

from __future__ import annotations

import grpc
import numpy as np

from client_sdk.sharing import Half, assemble
from harness.local import LocalDeployment
from mpc.fixedpoint import random_ring, to_wire
from proto import binding
from proto.starfish.v1 import client_pb2, client_pb2_grpc, common_pb2
from proto.wire import chunks

M = 64
CLIENTS = [f"c{i}" for i in range(6)]


def client_channel(dep: LocalDeployment, party: int) -> grpc.Channel:
    creds = grpc.ssl_channel_credentials(root_certificates=dep.ca_cert.read_bytes())
    return grpc.secure_channel(dep.address(party), creds, options=[("grpc.max_send_message_length", 16 * 1024 * 1024)])


def admin_channel(dep: LocalDeployment) -> grpc.Channel:
    """party0's admin API: its own listener (`admin_listen`)."""
    creds = grpc.ssl_channel_credentials(root_certificates=dep.ca_cert.read_bytes())
    return grpc.secure_channel(dep.admin_address, creds)


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


def round_view(dep):
    with client_channel(dep, 0) as ch:
        return client_pb2_grpc.ClientServiceStub(ch).GetRound(
            client_pb2.GetRoundRequest(), metadata=metadata(dep, "c0")
        )


def ring_scalar() -> common_pb2.Tensor:
    return common_pb2.Tensor(shape=[1], dtype="int64", data=to_wire(random_ring(1)))


def raw_upload(
    dep,
    party: int,
    client: str,
    data: bytes | None = None,
    token: str | None = None,
    chunk: int = 65536,
    header: common_pb2.UploadHeader | None = None,
    **header_kw,
):
    """Send one hand-built UploadShares stream (a bound header made for `data`, then changed by
    `header_kw`, or `header` as given); returns the ack or raises grpc.RpcError."""
    data = to_wire(random_ring(M)) if data is None else data
    if header is None:
        header = upload_header(dep, party, data, **header_kw)
    msgs = [common_pb2.UploadChunk(header=header)]
    msgs += [common_pb2.UploadChunk(data=p) for p in chunks(data, chunk)]
    with client_channel(dep, party) as ch:
        return client_pb2_grpc.ClientServiceStub(ch).UploadShares(
            iter(msgs), metadata=metadata(dep, client, token), timeout=20
        )


def upload_header(dep, party: int, data: bytes, **header_kw) -> common_pb2.UploadHeader:
    state = round_view(dep)
    norm, delta = header_kw.pop("norm_share", ring_scalar()), header_kw.pop("delta_share", ring_scalar())
    header = bound_header(party, state.round, data, 10, state.model_hash, norm.data, delta.data)
    header.norm_share.CopyFrom(norm)
    header.delta_share.CopyFrom(delta)
    for key, value in header_kw.items():  # changes made after binding: each is refused
        if isinstance(value, list):
            header.ClearField(key)
            getattr(header, key).extend(value)
        else:
            setattr(header, key, value)
    return header
