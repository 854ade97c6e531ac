"""TCP reassembly and the TLS record checks, on synthetic pcap files (no root needed)."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.netlab.flows import LINKTYPE_LINUX_SLL2, find, read_streams
from harness.netlab.tls_records import only_hellos_in_clear, parse_records, server_hello_version

A, B = (10, 20, 0, 10), (10, 20, 0, 11)


def _frame(seq: int, payload: bytes, syn: bool = False) -> bytes:
    tcp = struct.pack("!HHIIBBHHH", 40000, 443, seq, 0, 5 << 4, 0x02 if syn else 0x18, 65535, 0, 0) + payload
    ip = struct.pack("!BBHHHBBH4B4B", 0x45, 0, 20 + len(tcp), 0, 0, 64, 6, 0, *A, *B) + tcp
    sll2 = struct.pack("!HHIHBB8s", 0x0800, 0, 3, 1, 0, 6, b"")
    return sll2 + ip


def _pcap(frames: list[bytes]) -> bytes:
    out = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, LINKTYPE_LINUX_SLL2)
    for f in frames:
        out += struct.pack("<IIII", 0, 0, len(f), len(f)) + f
    return out


@settings(max_examples=60, deadline=None)
@given(
    data=st.binary(min_size=1, max_size=3000),
    cuts=st.lists(st.integers(0, 3000), max_size=12),
    isn=st.integers(0, 2**32 - 1),
    order=st.randoms(use_true_random=False),
    repeats=st.lists(st.integers(0, 20), max_size=4),
)
def test_reassembly_restores_the_stream_whatever_the_segmentation(tmp_path_factory, data, cuts, isn, order, repeats):
    bounds = sorted({0, len(data), *(c for c in cuts if c < len(data))})
    segments = [(bounds[i], data[bounds[i] : bounds[i + 1]]) for i in range(len(bounds) - 1)]
    segments += [segments[r % len(segments)] for r in repeats]  # retransmissions
    order.shuffle(segments)
    frames = [_frame(isn, b"", syn=True)] + [_frame((isn + 1 + at) % 2**32, p) for at, p in segments]
    path = tmp_path_factory.mktemp("pcap") / "x.pcap"
    path.write_bytes(_pcap(frames))
    (stream,) = read_streams(path).values()
    assert stream.payload == data
    assert stream.gaps == 0
    assert find({stream.key: stream}, {"tail": data[-min(len(data), 16) :]})


def test_a_missing_segment_is_a_gap_not_a_join(tmp_path):
    frames = [_frame(99, b"", syn=True), _frame(100, b"abcd"), _frame(108, b"ijkl")]
    path = tmp_path / "gap.pcap"
    path.write_bytes(_pcap(frames))
    (stream,) = read_streams(path).values()
    assert stream.chunks() == [b"abcd", b"ijkl"]
    assert stream.gaps == 1
    assert not find({stream.key: stream}, {"joined": b"dijk"})


def _record(rtype: int, body: bytes, version: int = 0x0303) -> bytes:
    return struct.pack("!BHH", rtype, version, len(body)) + body


def _server_hello(version: int) -> bytes:
    ext = struct.pack("!HHH", 43, 2, version)
    body = struct.pack("!H", 0x0303) + bytes(32) + b"\x00" + struct.pack("!HB", 0x1301, 0)
    body += struct.pack("!H", len(ext)) + ext
    return _record(22, bytes([2]) + len(body).to_bytes(3, "big") + body)


def test_tls13_shape_is_recognised():
    stream = _server_hello(0x0304) + _record(20, b"\x01") + _record(23, bytes(300)) + _record(23, bytes(50))
    v = parse_records(stream)
    assert v.well_formed and only_hellos_in_clear(v)
    assert v.encrypted_bytes == 350
    assert server_hello_version(stream) == 0x0304
    assert server_hello_version(_server_hello(0x0303)) == 0x0303


def test_plaintext_and_late_handshakes_are_flagged():
    assert parse_records(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").error
    assert parse_records(struct.pack("<q", 123456789) * 8).error  # raw int64 shares
    late = _server_hello(0x0304) + _record(23, bytes(10)) + _record(22, b"secret handshake")
    assert not only_hellos_in_clear(parse_records(late))
    cut = parse_records(_record(23, bytes(100))[:60])
    assert cut.well_formed is False and cut.truncated_tail == 60
    assert parse_records(_record(23, bytes(100))[:60], allow_truncated_tail=False).error
