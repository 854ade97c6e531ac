"""Is a TCP stream TLS 1.3, and how much of it travelled unencrypted?

A TLS stream is a sequence of records `type(1) version(2) length(2) body`, type 20-23,
version 0x0301-0x0303 (TLS 1.3 freezes the record version at 0x0303, 0x0301 allowed on the
ClientHello), body at most 2^14 + 256 bytes. In TLS 1.3 only the ClientHello and
ServerHello travel as plaintext handshake records (type 22); everything after them,
including the rest of the handshake and any alert, is an encrypted `application_data`
record (type 23) — a ChangeCipherSpec (type 20, one byte) may appear for compatibility.
The server's choice of TLS 1.3 is the ServerHello's `supported_versions` extension = 0x0304.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

HANDSHAKE, APPLICATION_DATA, CHANGE_CIPHER_SPEC, ALERT = 22, 23, 20, 21
MAX_RECORD = 2**14 + 256
SERVER_HELLO = 2
SUPPORTED_VERSIONS = 43
TLS13 = 0x0304


@dataclass
class TlsVerdict:
    """What the record layer of one stream direction shows."""

    records: int = 0
    encrypted_bytes: int = 0  #: body bytes of application_data records
    plaintext_bytes: int = 0  #: body bytes of handshake/alert records (hellos only, in TLS 1.3)
    truncated_tail: int = 0  #: bytes of a last record cut off by the end of the capture
    error: str | None = None  #: why the stream is not a well-formed TLS record sequence
    types: list[int] = field(default_factory=list)

    @property
    def well_formed(self) -> bool:
        return self.error is None and self.records > 0


def parse_records(stream: bytes, allow_truncated_tail: bool = True) -> TlsVerdict:
    """Walk the record layer of `stream` (one direction, from its first byte)."""
    v = TlsVerdict()
    at = 0
    while at < len(stream):
        if len(stream) - at < 5:
            v.truncated_tail = len(stream) - at
            break
        rtype, version, length = stream[at], *struct.unpack("!HH", stream[at + 1 : at + 5])
        if rtype not in (CHANGE_CIPHER_SPEC, ALERT, HANDSHAKE, APPLICATION_DATA):
            v.error = f"byte {at}: record type {rtype} is not TLS"
            return v
        if not 0x0301 <= version <= 0x0303:
            v.error = f"byte {at}: record version {version:#06x} is not TLS"
            return v
        if length > MAX_RECORD:
            v.error = f"byte {at}: record length {length} exceeds {MAX_RECORD}"
            return v
        if at + 5 + length > len(stream):
            v.truncated_tail = len(stream) - at
            break
        v.records += 1
        v.types.append(rtype)
        if rtype == APPLICATION_DATA:
            v.encrypted_bytes += length
        elif rtype in (HANDSHAKE, ALERT):
            v.plaintext_bytes += length
        at += 5 + length
    if v.truncated_tail and not allow_truncated_tail:
        v.error = f"stream ends inside a record ({v.truncated_tail} bytes)"
    return v


def only_hellos_in_clear(v: TlsVerdict) -> bool:
    """TLS 1.3 shape: plaintext handshake records only before the first encrypted record."""
    seen_encrypted = False
    for t in v.types:
        if t == APPLICATION_DATA:
            seen_encrypted = True
        elif t in (HANDSHAKE, ALERT) and seen_encrypted:
            return False
    return True


def server_hello_version(server_stream: bytes) -> int | None:
    """The version a ServerHello selects through `supported_versions` (None if absent)."""
    if len(server_stream) < 5 or server_stream[0] != HANDSHAKE:
        return None
    body = server_stream[5 : 5 + struct.unpack("!H", server_stream[3:5])[0]]
    if len(body) < 4 or body[0] != SERVER_HELLO:
        return None
    at = 4 + 2 + 32  # handshake header, legacy_version, random
    at += 1 + body[at]  # legacy_session_id_echo
    at += 2 + 1  # cipher_suite, legacy_compression_method
    end = at + 2 + struct.unpack("!H", body[at : at + 2])[0]
    at += 2
    while at + 4 <= min(end, len(body)):
        ext, length = struct.unpack("!HH", body[at : at + 4])
        if ext == SUPPORTED_VERSIONS and length == 2:
            return struct.unpack("!H", body[at + 4 : at + 6])[0]
        at += 4 + length
    return None
