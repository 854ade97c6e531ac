"""The wire format shared by the SDK and the party servers (numpy + generated protobuf only).

* Public models are flat float32 vectors with an architecture name; their content hash
  is sha256 over a domain tag, the architecture, the length and the little-endian bytes
  (`model_hash`, the one model hash of the project).
* Large payloads travel as a header message followed by raw byte chunks: a model
  (`ModelChunk`), a client's upload (`UploadChunk`) or a party's aggregate share
  (`ShareChunk`). Every such message is a `oneof part {header, data}`; `chunked_messages`
  writes any of them and `read_chunked` (or `split_header` + `read_payload`) reads them:
  the header first and once, then data until a byte limit the header fixes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from proto.starfish.v1 import common_pb2

MODEL_HASH_TAG = b"starfish-model-v1\x00"


class StreamError(ValueError):
    """A header-then-chunks stream is malformed (nothing read from it may be used)."""


def model_hash(arch: str, params: np.ndarray) -> str:
    """Content hash of a public model: sha256(tag ‖ arch ‖ 0 ‖ len as u64 LE ‖ float32 LE bytes)."""
    flat = np.ascontiguousarray(params, dtype="<f4").reshape(-1)
    h = hashlib.sha256(MODEL_HASH_TAG)
    h.update(arch.encode("utf-8") + b"\x00")
    h.update(int(flat.size).to_bytes(8, "little"))
    h.update(flat.tobytes())
    return h.hexdigest()


def sha256_hex(data: bytes | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


def chunks(data: bytes, size: int) -> Iterator[bytes]:
    """Split `data` into pieces of at most `size` bytes (none when data is empty)."""
    view = memoryview(data)
    for start in range(0, len(view), size):
        yield bytes(view[start : start + size])


def model_to_bytes(params: np.ndarray) -> bytes:
    return np.ascontiguousarray(params, dtype="<f4").reshape(-1).tobytes()


def model_from_bytes(data: bytes, num_params: int) -> np.ndarray:
    if len(data) != 4 * num_params:
        raise StreamError(
            f"model payload has {len(data)} bytes, expected {4 * num_params} for {num_params} float32 parameters"
        )
    return np.frombuffer(data, dtype="<f4").astype(np.float32)


# ---------------------------------------------------------------------------- chunked streams
def chunked_messages(message_type: type, header: Any, data: bytes, chunk_bytes: int) -> Iterator[Any]:
    """`message_type(header=header)`, then `message_type(data=piece)` for pieces of at most
    `chunk_bytes` (message_type is ModelChunk, UploadChunk or ShareChunk)."""
    yield message_type(header=header)
    for piece in chunks(data, chunk_bytes):
        yield message_type(data=piece)


def split_header(stream: Iterable[Any], what: str) -> tuple[Any, Iterator[Any]]:
    """The header of a chunked stream (it must come first) and the rest of the stream."""
    it = iter(stream)
    first = next(it, None)
    if first is None or first.WhichOneof("part") != "header":
        raise StreamError(f"{what} must start with its header")
    return first.header, it


def read_payload(rest: Iterable[Any], limit: int, what: str) -> bytearray:
    """The data after the header, read until the stream ends; stops as soon as more than
    `limit` bytes arrived or a second header comes."""
    buf = bytearray()
    for msg in rest:
        if msg.WhichOneof("part") != "data":
            raise StreamError(f"{what} carries a second header")
        buf += msg.data
        if len(buf) > limit:
            raise StreamError(f"{what} is longer than the {limit} bytes its header declares")
    return buf


def read_chunked(stream: Iterable[Any], limit: Callable[[Any], int], what: str) -> tuple[Any, bytearray]:
    """(header, payload) of a chunked stream; `limit(header)` checks the header and returns
    the largest payload it admits (raising for a header it refuses)."""
    header, rest = split_header(stream, what)
    return header, read_payload(rest, limit(header), what)


# ---------------------------------------------------------------------------- models
def model_messages(header: common_pb2.ModelHeader, params: np.ndarray, chunk_bytes: int) -> Iterator[Any]:
    """`ModelChunk`s: the header, then the float32 payload in chunks."""
    return chunked_messages(common_pb2.ModelChunk, header, model_to_bytes(params), chunk_bytes)


def collect_model(stream: Iterable[Any], max_params: int | None = None) -> tuple[Any, np.ndarray]:
    """Read a `ModelChunk` stream; returns (header, float32 params) after checking length and hash."""

    def limit(header: common_pb2.ModelHeader) -> int:
        if max_params is not None and header.num_params > max_params:
            raise StreamError(f"model has {header.num_params} parameters, more than the limit {max_params}")
        return 4 * int(header.num_params)

    header, data = read_chunked(stream, limit, "a model stream")
    params = model_from_bytes(bytes(data), int(header.num_params))
    actual = model_hash(header.arch, params)
    if actual != header.model_hash:
        raise StreamError(f"model content hash {actual[:12]}… does not match its header {header.model_hash[:12]}…")
    return header, params


# ---------------------------------------------------------------------------- aggregate shares
def share_messages(header: common_pb2.ShareHeader, data: bytes, chunk_bytes: int) -> Iterator[Any]:
    """`ShareChunk`s: the header, then the int64 share bytes in chunks."""
    return chunked_messages(common_pb2.ShareChunk, header, data, chunk_bytes)


def read_share_stream(stream: Iterable[Any], max_len: int) -> tuple[common_pb2.ShareHeader, np.ndarray]:
    """Read a `ShareChunk` stream; checks dtype, declared shape, byte length and content hash."""

    def limit(header: common_pb2.ShareHeader) -> int:
        if header.dtype != "int64" or len(header.shape) != 1 or not 0 < header.shape[0] <= max_len:
            raise StreamError(f"bad share header: dtype {header.dtype!r}, shape {list(header.shape)}")
        return 8 * int(header.shape[0])

    header, buf = read_chunked(stream, limit, "a share stream")
    if len(buf) != 8 * header.shape[0]:
        raise StreamError(f"share stream has {len(buf)} bytes, expected {8 * header.shape[0]}")
    if sha256_hex(buf) != header.content_sha256:
        raise StreamError("share bytes do not match the declared content hash")
    return header, np.frombuffer(bytes(buf), dtype="<i8").astype(np.int64)
