"""A check step's vector on the wire (server.upload_check): streamed in chunks and read back
into the same int64 vector; a stream whose bytes, length or order do not match its header is
refused with a message naming what is wrong."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proto.starfish.v1 import peer_pb2
from proto.wire import StreamError
from server.upload_check import read_step, step_messages

WORDS = st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=300)


def _messages(vector: np.ndarray, chunk_bytes: int = 64) -> list:
    header = peer_pb2.CheckStepHeader(batch_id="check-r1.1-00", step=3)
    return [peer_pb2.CheckChunk.FromString(m.SerializeToString()) for m in step_messages(header, vector, chunk_bytes)]


@settings(max_examples=50, deadline=None)
@given(WORDS, st.sampled_from([8, 16, 64, 1024]))
def test_a_step_vector_reads_back_exactly(words, chunk_bytes) -> None:
    vector = np.array(words, dtype=np.int64)
    header, got = read_step(iter(_messages(vector, chunk_bytes)), len(words))
    assert (header.batch_id, header.step) == ("check-r1.1-00", 3)
    assert got.dtype == np.int64 and np.array_equal(got, vector)


def test_a_changed_byte_is_refused() -> None:
    messages = _messages(np.arange(40, dtype=np.int64))
    messages[2] = peer_pb2.CheckChunk(data=b"\x01" + messages[2].data[1:])
    with pytest.raises(StreamError, match="do not match its header"):
        read_step(iter(messages), 40)


def test_a_missing_or_extra_chunk_is_refused() -> None:
    messages = _messages(np.arange(40, dtype=np.int64))
    with pytest.raises(StreamError, match="do not match its header"):
        read_step(iter(messages[:-1]), 40)
    with pytest.raises(StreamError, match="longer than the 40 words"):
        read_step(iter([*messages, messages[1]]), 40)


def test_a_second_header_or_an_oversized_step_is_refused() -> None:
    messages = _messages(np.arange(40, dtype=np.int64))
    with pytest.raises(StreamError, match="second header"):
        read_step(iter([*messages[:2], messages[0]]), 40)
    with pytest.raises(StreamError, match="longer than 39"):
        read_step(iter(messages), 39)
