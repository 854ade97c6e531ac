"""The wire format: the one model hash and the one header-then-chunks stream codec."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proto.starfish.v1 import common_pb2
from proto.wire import (
    MODEL_HASH_TAG,
    StreamError,
    chunked_messages,
    collect_model,
    model_hash,
    model_messages,
    read_chunked,
    read_share_stream,
    sha256_hex,
    share_messages,
)

CHUNK_TYPES = {
    "model": (common_pb2.ModelChunk, common_pb2.ModelHeader(arch="a")),
    "upload": (common_pb2.UploadChunk, common_pb2.UploadHeader(round=3)),
    "share": (common_pb2.ShareChunk, common_pb2.ShareHeader(round=3)),
}


def test_model_hash_definition_and_sensitivity() -> None:
    vec = np.linspace(-1, 1, 50, dtype=np.float32)
    body = b"digits_mlp\x00" + (50).to_bytes(8, "little") + vec.astype("<f4").tobytes()
    expected = hashlib.sha256(MODEL_HASH_TAG + body).hexdigest()
    assert model_hash("digits_mlp", vec) == expected
    assert model_hash("digits_mlp", vec.astype(np.float64)) == expected  # canonical float32 bytes
    assert model_hash("mnist_cnn", vec) != expected
    flipped = vec.copy()
    flipped.view(np.uint32)[7] ^= 1  # one bit of one coordinate
    assert model_hash("digits_mlp", flipped) != expected


@settings(max_examples=60, deadline=None)
@given(
    kind=st.sampled_from(sorted(CHUNK_TYPES)),
    payload=st.binary(max_size=300),
    chunk=st.integers(1, 64),
    slack=st.integers(0, 5),
)
def test_every_chunked_stream_reads_back_what_was_written(kind: str, payload: bytes, chunk: int, slack: int) -> None:
    message_type, header = CHUNK_TYPES[kind]
    messages = list(chunked_messages(message_type, header, payload, chunk))
    assert all(len(m.data) <= chunk for m in messages[1:])
    got_header, got = read_chunked(iter(messages), lambda h: len(payload) + slack, "a stream")
    assert got_header == header and bytes(got) == payload


def _stream(*parts, then_fail: bool = False):
    yield from parts
    if then_fail:
        raise AssertionError("the reader went on after it should have stopped")


def test_malformed_streams_are_refused() -> None:
    header = common_pb2.ModelChunk(header=common_pb2.ModelHeader(arch="a"))
    data = common_pb2.ModelChunk(data=b"xyz")
    with pytest.raises(StreamError, match="must start with its header"):
        read_chunked(_stream(data, header), lambda h: 10, "a model stream")
    with pytest.raises(StreamError, match="must start with its header"):
        read_chunked(_stream(), lambda h: 10, "a model stream")
    with pytest.raises(StreamError, match="second header"):
        read_chunked(_stream(header, data, header), lambda h: 10, "a model stream")
    with pytest.raises(StreamError, match="longer than the 5 bytes"):  # stops at once: bounded memory
        read_chunked(_stream(header, data, data, then_fail=True), lambda h: 5, "a model stream")


def test_models_are_checked_against_their_header() -> None:
    params = np.arange(10, dtype=np.float32)
    good = common_pb2.ModelHeader(arch="toy", num_params=10, model_hash=model_hash("toy", params))
    header, got = collect_model(model_messages(good, params, 7))
    assert header == good and np.array_equal(got, params)
    with pytest.raises(StreamError, match="does not match its header"):
        collect_model(model_messages(good, params + 1, 7))
    with pytest.raises(StreamError, match="more than the limit"):
        collect_model(model_messages(good, params, 7), max_params=9)
    with pytest.raises(StreamError, match="expected 40"):
        collect_model(model_messages(good, params[:9], 7))


def test_share_streams_are_checked_against_their_header() -> None:
    share = np.arange(-5, 6, dtype=np.int64)
    data = share.astype("<i8").tobytes()
    header = common_pb2.ShareHeader(round=1, shape=[share.size], dtype="int64", content_sha256=sha256_hex(data))
    _, got = read_share_stream(share_messages(header, data, 16), max_len=share.size)
    assert np.array_equal(got, share)
    with pytest.raises(StreamError, match="bad share header"):
        read_share_stream(share_messages(header, data, 16), max_len=share.size - 1)
    with pytest.raises(StreamError, match="content hash"):
        read_share_stream(share_messages(header, data[:-8] + b"\x01" * 8, 16), max_len=share.size)
    with pytest.raises(StreamError, match="expected 88"):
        read_share_stream(share_messages(header, data[:-8], 16), max_len=share.size)


def test_wire_and_codecs_load_without_torch() -> None:
    code = "import sys, proto.wire, mpc.fixedpoint, mpc.masks, mpc.ports, client_sdk; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
