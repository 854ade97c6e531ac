"""Hypothesis strategies for the wire contract, and the call that sends them.

* `random_message(descriptor, hints)`: any message of a type, built field by field from its
  descriptor (every scalar type at its full range, NaN and ±inf doubles, enum numbers the
  contract does not define, repeated and map fields, nested messages), strings drawn from
  random text and from `hints.names` (names the service knows: client ids, job ids), so
  that some requests reach the handlers' deeper checks; `hints.fields` replaces the values
  of named fields (e.g. rounds away from the live one);
* `mutated(seed)`: a valid message's encoding with bytes flipped, cut, inserted or repeated
  (often no longer a valid protobuf: the server must refuse it, not fail);
* `send(channel, method, payloads, metadata)`: one call with raw bytes on the wire, unary or
  streaming as the method is, returning its status code (a streamed reply is read up to
  `MAX_REPLIES` messages).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import grpc
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

#: examples per property (`STARFISH_FUZZ_EXAMPLES`; the default keeps the folder near 2 minutes)
EXAMPLES = int(os.environ.get("STARFISH_FUZZ_EXAMPLES", "25"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)
CALL_TIMEOUT_S = 1.0  #: a call may wait (a round's close, a stream): past this it is cut, which is fine
MAX_REPLIES = 3
BAD_CODES = (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL)
MAX_DEPTH = 3

_INT_RANGES = {
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SINT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SINT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
    FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1),
}


@dataclass(frozen=True)
class Hints:
    """What a random message draws besides random values: `names` for its strings, and a
    strategy per field name in `fields` (at every depth) that replaces the random value."""

    names: tuple[str, ...] = ()
    fields: Mapping[str, st.SearchStrategy] = dataclasses.field(default_factory=dict)


def _scalar(field: FieldDescriptor, hints: Sequence[str]) -> st.SearchStrategy:
    kind = field.type
    if kind in _INT_RANGES:
        low, high = _INT_RANGES[kind]
        return st.one_of(st.integers(max(low, -2), 16), st.integers(low, high))
    if kind in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        floats = st.floats(allow_nan=True, allow_infinity=True, width=64 if kind == FieldDescriptor.TYPE_DOUBLE else 32)
        return st.one_of(st.floats(-10, 10), floats)
    if kind == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if kind == FieldDescriptor.TYPE_ENUM:
        return st.integers(-1, len(field.enum_type.values) + 2)
    if kind == FieldDescriptor.TYPE_BYTES:
        return st.binary(max_size=96)
    text = st.text(max_size=40)
    return st.one_of(st.sampled_from(list(hints)), text) if hints else text


def _field(field: FieldDescriptor, hints: Hints, depth: int) -> st.SearchStrategy:
    if field.name in hints.fields:
        return hints.fields[field.name]
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return random_message(field.message_type, hints, depth + 1)
    return _scalar(field, hints.names)


@st.composite
def _message(draw, descriptor: Descriptor, hints: Hints, depth: int) -> bytes:
    from google.protobuf import message_factory

    msg = message_factory.GetMessageClass(descriptor)()
    for field in descriptor.fields:
        if not draw(st.booleans()):
            continue
        entry = field.message_type
        if entry is not None and entry.GetOptions().map_entry:
            key_f, value_f = entry.fields_by_name["key"], entry.fields_by_name["value"]
            entries = draw(st.dictionaries(_scalar(key_f, hints.names), _field(value_f, hints, depth), max_size=3))
            for key, value in entries.items():
                if value_f.type == FieldDescriptor.TYPE_MESSAGE:
                    getattr(msg, field.name)[key].MergeFromString(value)
                else:
                    getattr(msg, field.name)[key] = value
        elif field.is_repeated:
            values = draw(st.lists(_field(field, hints, depth), max_size=4))
            if field.type == FieldDescriptor.TYPE_MESSAGE:
                for value in values:
                    getattr(msg, field.name).add().MergeFromString(value)
            else:
                getattr(msg, field.name).extend(values)
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            getattr(msg, field.name).MergeFromString(draw(_field(field, hints, depth)))
        else:
            setattr(msg, field.name, draw(_field(field, hints, depth)))
    return msg.SerializeToString()


def random_message(descriptor: Descriptor, hints: Hints, depth: int = 0) -> st.SearchStrategy[bytes]:
    """The encoding of a random message of type `descriptor` (see the module docstring)."""
    if depth >= MAX_DEPTH:
        return st.just(b"")
    return _message(descriptor, hints, depth)


@st.composite
def mutated(draw, seed: bytes) -> bytes:
    """`seed` with a few random edits: flip, cut, insert or repeat a span."""
    data = bytearray(seed)
    for _ in range(draw(st.integers(1, 4))):
        how = draw(st.sampled_from(("flip", "cut", "insert", "repeat")))
        at = draw(st.integers(0, len(data)))
        if how == "flip" and data:
            at = min(at, len(data) - 1)
            data[at] ^= draw(st.integers(1, 255))
        elif how == "cut":
            del data[at : at + draw(st.integers(1, 16))]
        elif how == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        else:
            data[at:at] = data[at : at + draw(st.integers(1, 16))]
    return bytes(data)


def method_path(method: MethodDescriptor) -> str:
    return f"/{method.containing_service.full_name}/{method.name}"


def send(
    channel: grpc.Channel, method: MethodDescriptor, payloads: Sequence[bytes], metadata: Sequence[tuple[str, str]]
) -> grpc.StatusCode:
    """One call of `method` with raw request bytes (one per stream message); its status code."""
    path = method_path(method)
    kwargs = {"request_serializer": None, "response_deserializer": None}
    try:
        if method.client_streaming and method.server_streaming:
            replies = channel.stream_stream(path, **kwargs)(iter(payloads), metadata=metadata, timeout=CALL_TIMEOUT_S)
        elif method.client_streaming:
            channel.stream_unary(path, **kwargs)(iter(payloads), metadata=metadata, timeout=CALL_TIMEOUT_S)
            return grpc.StatusCode.OK
        elif method.server_streaming:
            replies = channel.unary_stream(path, **kwargs)(payloads[0], metadata=metadata, timeout=CALL_TIMEOUT_S)
        else:
            channel.unary_unary(path, **kwargs)(payloads[0], metadata=metadata, timeout=CALL_TIMEOUT_S)
            return grpc.StatusCode.OK
        for count, _ in enumerate(replies):
            if count + 1 >= MAX_REPLIES:
                replies.cancel()
                break
        return grpc.StatusCode.OK
    except grpc.RpcError as exc:
        return exc.code()
