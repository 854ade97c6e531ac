"""Wire helpers shared by the SDK and the party servers (numpy + generated protobuf only).

* Public models are flat float32 vectors with an architecture name; their content hash
  is sha256 over a domain tag, the architecture, the length and the little-endian bytes.
* Large payloads travel as a header message followed by raw byte chunks.
"""

from __future__ import annotations

import hashlib
from typing import Iterable, Iterator

import numpy as np

MODEL_HASH_TAG = b"starfish-model-v1\x00"


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
        raise ValueError(
            f"model payload has {len(data)} bytes, expected {4 * num_params} for {num_params} float32 parameters"
        )
    return np.frombuffer(data, dtype="<f4").astype(np.float32)


def model_messages(pb, header, params: np.ndarray, chunk_bytes: int) -> Iterator:
    """Yield `ModelChunk`s: the header, then the float32 payload in chunks (`pb` = common_pb2)."""
    yield pb.ModelChunk(header=header)
    for piece in chunks(model_to_bytes(params), chunk_bytes):
        yield pb.ModelChunk(data=piece)


def collect_model(stream: Iterable, max_params: int | None = None):
    """Read a `ModelChunk` stream; returns (header, float32 params) after checking length and hash."""
    header = None
    parts: list[bytes] = []
    for msg in stream:
        kind = msg.WhichOneof("part")
        if kind == "header":
            if header is not None:
                raise ValueError("model stream carries two headers")
            header = msg.header
        elif kind == "data":
            if header is None:
                raise ValueError("model stream sends data before its header")
            parts.append(msg.data)
    if header is None:
        raise ValueError("model stream ended without a header")
    if max_params is not None and header.num_params > max_params:
        raise ValueError(f"model has {header.num_params} parameters, more than the limit {max_params}")
    params = model_from_bytes(b"".join(parts), int(header.num_params))
    actual = model_hash(header.arch, params)
    if actual != header.model_hash:
        raise ValueError(f"model content hash {actual[:12]}… does not match its header {header.model_hash[:12]}…")
    return header, params
