"""TCP streams out of a pcap file, and searches over them.

`read_streams(path, ifindexes)` parses a pcap (Ethernet or Linux cooked v2 link layer, IPv4,
TCP; with cooked v2, only frames seen on the given interfaces),
and reassembles each direction of each connection from its sequence numbers: a
retransmitted or overlapping segment contributes its new bytes once; a hole (a frame the
capture missed) is counted in `Stream.gaps` and the bytes on either side are not joined.
`find(streams, needles)` reports which streams contain which byte strings.
"""

from __future__ import annotations

import struct
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

LINKTYPE_ETHERNET = 1
LINKTYPE_LINUX_SLL2 = 276
ETHERTYPE_IPV4 = 0x0800
TCP = 6
SYN = 0x02


@dataclass
class Stream:
    """One direction of one TCP connection: (src, sport) → (dst, dport)."""

    src: str
    sport: int
    dst: str
    dport: int
    segments: dict[int, bytes] = field(default_factory=dict)  #: absolute seq -> payload
    isn: int | None = None  #: first payload sequence number (SYN + 1) when the SYN was seen
    frames: int = 0
    gaps: int = 0
    _chunks: list[bytes] | None = None

    @property
    def key(self) -> tuple[str, int, str, int]:
        return (self.src, self.sport, self.dst, self.dport)

    def chunks(self) -> list[bytes]:
        """The payload as contiguous pieces in sequence order (one piece unless gaps)."""
        if self._chunks is None:
            self._chunks = self._assemble()
        return self._chunks

    def _assemble(self) -> list[bytes]:
        if not self.segments:
            return []
        base = self.isn if self.isn is not None else min(self.segments)
        pieces: list[bytes] = []
        current = bytearray()
        at = 0  # next expected offset relative to base
        for rel, payload in sorted(((seq - base) % 2**32, p) for seq, p in self.segments.items()):
            if rel > at:
                self.gaps += 1
                pieces.append(bytes(current))
                current, at = bytearray(), rel
            if rel + len(payload) > at:
                current += payload[at - rel :]
                at = rel + len(payload)
        pieces.append(bytes(current))
        return [p for p in pieces if p]

    @property
    def payload(self) -> bytes:
        """The first contiguous piece (the whole stream when the capture missed nothing)."""
        chunks = self.chunks()
        return chunks[0] if chunks else b""

    @property
    def nbytes(self) -> int:
        return sum(len(c) for c in self.chunks())


def _records(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(link type, frame) for every record of a classic pcap file."""
    if len(data) < 24:
        return
    magic = data[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        endian = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        endian = ">"
    else:
        raise ValueError("not a pcap file (unknown magic number)")
    linktype = struct.unpack(endian + "I", data[20:24])[0]
    at = 24
    while at + 16 <= len(data):
        incl = struct.unpack(endian + "I", data[at + 8 : at + 12])[0]
        yield linktype, data[at + 16 : at + 16 + incl]
        at += 16 + incl


def _ipv4(linktype: int, frame: bytes, ifindexes: Collection[int] | None) -> bytes | None:
    if linktype == LINKTYPE_LINUX_SLL2:
        proto, ifindex = struct.unpack("!HxxI", frame[:8])
        if ifindexes is not None and ifindex not in ifindexes:
            return None
        payload = frame[20:]
    elif linktype == LINKTYPE_ETHERNET:
        proto, payload = struct.unpack("!H", frame[12:14])[0], frame[14:]
    else:
        raise ValueError(f"unsupported pcap link type {linktype}")
    return payload if proto == ETHERTYPE_IPV4 else None


def read_streams(path: Path, ifindexes: Collection[int] | None = None) -> dict[tuple[str, int, str, int], Stream]:
    """Every TCP stream direction in the capture, keyed by (src, sport, dst, dport);
    `ifindexes`: keep only cooked-v2 frames recorded on these interfaces."""
    streams: dict[tuple[str, int, str, int], Stream] = {}
    for linktype, frame in _records(Path(path).read_bytes()):
        ip = _ipv4(linktype, frame, ifindexes)
        if ip is None or len(ip) < 20 or ip[9] != TCP:
            continue
        ihl = (ip[0] & 0x0F) * 4
        total = struct.unpack("!H", ip[2:4])[0] or len(ip)
        tcp = ip[ihl:total]
        if len(tcp) < 20:
            continue
        sport, dport, seq = struct.unpack("!HHI", tcp[:8])
        offset, flags = (tcp[12] >> 4) * 4, tcp[13]
        src, dst = ".".join(map(str, ip[12:16])), ".".join(map(str, ip[16:20]))
        key = (src, sport, dst, dport)
        stream = streams.setdefault(key, Stream(src, sport, dst, dport))
        stream.frames += 1
        if flags & SYN:
            stream.isn = (seq + 1) % 2**32
        payload = tcp[offset:]
        if payload and len(payload) > len(stream.segments.get(seq, b"")):
            stream.segments[seq] = payload
    return streams


def find(streams: Mapping[tuple, Stream], needles: Mapping[str, bytes]) -> list[tuple[str, Stream]]:
    """(needle name, stream) for every stream whose payload contains that needle."""
    hits = []
    for stream in streams.values():
        chunks = stream.chunks()
        for name, needle in needles.items():
            if any(needle in c for c in chunks):
                hits.append((name, stream))
    return hits
