"""Streaming an int64 share (an aggregate share) as a header plus raw byte chunks."""

from __future__ import annotations

from typing import Iterable, Iterator

import numpy as np

from client_sdk.wire import chunks, sha256_hex
from proto.starfish.v1 import common_pb2


def share_messages(header: common_pb2.ShareHeader, data: bytes, chunk_bytes: int) -> Iterator[common_pb2.ShareChunk]:
    yield common_pb2.ShareChunk(header=header)
    for piece in chunks(data, chunk_bytes):
        yield common_pb2.ShareChunk(data=piece)


def read_share_stream(stream: Iterable, max_len: int) -> tuple[common_pb2.ShareHeader, np.ndarray]:
    """Read a ShareChunk stream; checks dtype, declared shape, byte length and content hash."""
    header = None
    buf = bytearray()
    for msg in stream:
        if msg.WhichOneof("part") == "header":
            if header is not None:
                raise ValueError("share stream carries two headers")
            header = msg.header
            if header.dtype != "int64" or len(header.shape) != 1 or not 0 < header.shape[0] <= max_len:
                raise ValueError(f"bad share header: dtype {header.dtype!r}, shape {list(header.shape)}")
        else:
            if header is None:
                raise ValueError("share stream sends data before its header")
            buf += msg.data
            if len(buf) > 8 * header.shape[0]:
                raise ValueError("share stream is longer than its declared shape")
    if header is None:
        raise ValueError("share stream ended without a header")
    if len(buf) != 8 * header.shape[0]:
        raise ValueError(f"share stream has {len(buf)} bytes, expected {8 * header.shape[0]}")
    if sha256_hex(buf) != header.content_sha256:
        raise ValueError("share bytes do not match the declared content hash")
    return header, np.frombuffer(bytes(buf), dtype="<i8").astype(np.int64)
