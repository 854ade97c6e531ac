"""Framed messages over TLS connections: one duplex socket, or two one-way "lanes".

A frame is a 9-byte header — kind (1 byte) and payload length (8 bytes, little endian) —
then the payload. Kinds: `TENSOR` (raw little-endian bytes of a tensor whose shape and
dtype the receiver already knows from the protocol), `JSON` (a control message, UTF-8
JSON object, at most `MAX_JSON_BYTES`), `ERROR` (a JSON object {"error": text} the peer
sends before it gives up). Nothing received is ever unpickled or evaluated.

Between the two parties a channel has two connections ("lanes"), one per direction: a
sender thread writes the outgoing lane, the caller's thread reads the incoming one. So a
party never blocks in a send while its peer also sends (both parties of an all-reduce send
first, then receive), encryption of the outgoing data overlaps decryption of the incoming
data, and no TLS connection is ever used by two threads at once (OpenSSL does not allow
that). A request/response link (party 0 ↔ dealer) uses one socket and sends inline.
Receives fill the destination tensor in place. Every wait is bounded by `timeout_s`; a
closed or reset connection raises `ChannelClosed` at once, a silent peer `ChannelTimeout`
after `timeout_s`. torch is loaded by the first tensor frame's caller, not by this module:
a party that only uses the control messages (the rendezvous checks) stays free of it.
"""

from __future__ import annotations

import json
import queue
import socket
import ssl
import struct
import threading
from typing import TYPE_CHECKING, Any

from mpc.plane.tls import PeerRefused, describe

if TYPE_CHECKING:
    import torch

HEADER = struct.Struct("<BQ")
TENSOR, JSON, ERROR = 1, 2, 3
KIND_NAMES = {TENSOR: "tensor", JSON: "control message", ERROR: "error"}
MAX_JSON_BYTES = 1 << 20
_STOP = object()


class ChannelClosed(ConnectionError):
    """The peer closed or reset the connection, or sent something the protocol forbids."""


class ChannelTimeout(TimeoutError):
    """The peer sent nothing within the channel's timeout."""


class RemoteError(RuntimeError):
    """The peer reported an error (an ERROR frame) and gave up."""


def tensor_bytes(t: torch.Tensor) -> memoryview:
    """A byte view of a CPU tensor (zero-copy when it is contiguous)."""
    if t.device.type != "cpu":
        raise ValueError("the MPC plane sends CPU tensors only")
    if t.numel() == 0:
        return memoryview(bytearray())
    return memoryview(t.detach().reshape(-1).numpy()).cast("B")


class Channel:
    """Framed messages to one peer (see the module doc).

    `incoming` is read on the caller's thread. With `outgoing` (a second connection) sends
    go through a sender thread; without it they are written inline on `incoming`.
    """

    def __init__(
        self, incoming: socket.socket, timeout_s: float, peer: str, outgoing: socket.socket | None = None
    ) -> None:
        self.sock = incoming
        self.out = outgoing if outgoing is not None else incoming
        self.peer = peer
        self.timeout_s = timeout_s
        for s in {self.sock, self.out}:
            s.settimeout(timeout_s)
            if s.family in (socket.AF_INET, socket.AF_INET6):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.bytes_sent = 0
        self.bytes_received = 0
        self._error: BaseException | None = None
        self._header = bytearray(HEADER.size)
        self._queued = 0  # frames handed to the sender thread ...
        self._written = 0  # ... and frames it has written (or dropped after an error)
        self._progress = threading.Condition()
        self._outbox: queue.SimpleQueue[Any] | None = None
        self._sender: threading.Thread | None = None
        if outgoing is not None:
            self._outbox = queue.SimpleQueue()
            self._sender = threading.Thread(target=self._send_loop, name=f"plane-send-{peer}", daemon=True)
            self._sender.start()

    # ---------------------------------------------------------------- sending
    def _write(self, parts: tuple[Any, ...]) -> None:
        """Write a queued frame's byte parts; its last part may be the tensor kept alive (skipped)."""
        for part in parts:
            if isinstance(part, bytes | bytearray | memoryview):
                self.out.sendall(part)

    def _send_loop(self) -> None:
        assert self._outbox is not None
        while True:
            item = self._outbox.get()
            if item is _STOP:
                return
            if self._error is None:  # else the lane is broken; the caller sees the error
                try:
                    self._write(item)
                except (OSError, ValueError) as exc:
                    self._error = exc
            with self._progress:
                self._written += 1
                self._progress.notify_all()

    def _queue(self, kind: int, payload: memoryview | bytes, keep: Any = None) -> None:
        self._raise_if_broken()
        header = HEADER.pack(kind, len(payload))
        self.bytes_sent += HEADER.size + len(payload)
        # small frames go out as one write; a large payload is sent from its own buffer,
        # and `keep` (the tensor) stays referenced until the sender has written it
        item = (header + bytes(payload),) if len(payload) <= 64 * 1024 else (header, payload, keep)
        if self._outbox is not None:
            self._queued += 1
            self._outbox.put(item)
            return
        try:
            self._write(item)
        except (OSError, ValueError) as exc:
            self._error = exc
            raise self._wrap(exc) from None

    def send_tensor(self, t: torch.Tensor) -> None:
        data = t.detach().contiguous()
        self._queue(TENSOR, tensor_bytes(data), data)

    def send_json(self, message: dict[str, Any]) -> None:
        self._queue(JSON, json.dumps(message, separators=(",", ":")).encode())

    def send_error(self, text: str) -> None:
        """Tell the peer why we give up (best effort; the connection is closed next)."""
        try:
            self._queue(ERROR, json.dumps({"error": text}).encode())
        except ConnectionError:
            pass

    def drain(self) -> None:
        """Wait until every queued frame was written (the caller may then reuse its tensors)."""
        if self._outbox is not None and self._written < self._queued:
            with self._progress:
                if not self._progress.wait_for(lambda: self._written >= self._queued, self.timeout_s):
                    raise ChannelTimeout(f"{self.peer} accepted no data for {self.timeout_s:.1f} s (session timeout)")
        self._raise_if_broken()

    def _raise_if_broken(self) -> None:
        if self._error is not None:
            raise self._wrap(self._error) from None

    # ---------------------------------------------------------------- receiving
    def _recv_exact(self, view: memoryview) -> None:
        got = 0
        while got < len(view):
            try:
                n = self.sock.recv_into(view[got:], len(view) - got)
            except TimeoutError:
                raise ChannelTimeout(f"{self.peer} sent nothing for {self.timeout_s:.1f} s (session timeout)") from None
            except (OSError, ValueError) as exc:
                raise self._wrap(exc) from None
            if n == 0:
                raise ChannelClosed(f"{self.peer} closed the connection")
            got += n
        self.bytes_received += len(view)

    def _recv_header(self, expect: int) -> int:
        self._recv_exact(memoryview(self._header))
        kind, length = HEADER.unpack(self._header)
        if kind == ERROR and length <= MAX_JSON_BYTES:
            raise RemoteError(f"{self.peer}: {self._recv_json_body(length).get('error', 'unspecified error')}")
        if kind != expect:
            raise ChannelClosed(
                f"{self.peer} sent a {KIND_NAMES.get(kind, f'kind-{kind} frame')} where a "
                f"{KIND_NAMES[expect]} was due: the parties are out of step"
            )
        return length

    def _recv_json_body(self, length: int) -> dict[str, Any]:
        buf = bytearray(length)
        self._recv_exact(memoryview(buf))
        try:
            message = json.loads(buf)
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise ChannelClosed(f"{self.peer} sent a control message that is not JSON") from None
        if not isinstance(message, dict):
            raise ChannelClosed(f"{self.peer} sent a control message that is not a JSON object")
        return message

    def recv_json(self) -> dict[str, Any]:
        length = self._recv_header(JSON)
        if length > MAX_JSON_BYTES:
            raise ChannelClosed(f"{self.peer} sent a control message of {length} bytes (limit {MAX_JSON_BYTES})")
        return self._recv_json_body(length)

    def recv_into(self, out: torch.Tensor) -> torch.Tensor:
        """Fill the contiguous CPU tensor `out` with the next tensor frame (sizes must match)."""
        if not out.is_contiguous():
            raise ValueError("recv_into needs a contiguous tensor")
        length = self._recv_header(TENSOR)
        view = tensor_bytes(out)
        if length != len(view):
            raise ChannelClosed(
                f"{self.peer} sent {length} bytes where {len(view)} ({tuple(out.shape)} {out.dtype}) were due: "
                "the parties are out of step"
            )
        self._recv_exact(view)
        return out

    def recv_like(self, template: torch.Tensor) -> torch.Tensor:
        """A new tensor of `template`'s shape and dtype, filled from the next tensor frame."""
        import torch

        return self.recv_into(torch.empty(template.shape, dtype=template.dtype))

    # ---------------------------------------------------------------- lifecycle
    def _wrap(self, exc: BaseException) -> ConnectionError:
        if isinstance(exc, ssl.SSLEOFError | ssl.SSLZeroReturnError | ConnectionResetError | BrokenPipeError):
            return ChannelClosed(f"connection to {self.peer} lost: {exc}")
        if isinstance(exc, ssl.SSLError):
            return PeerRefused(f"{self.peer}: {describe(exc)}")
        if isinstance(exc, ConnectionError):
            return exc
        return ChannelClosed(f"connection to {self.peer} lost: {exc}")

    def close(self) -> None:
        """Stop the sender (queued frames are sent first when possible) and close the sockets."""
        if self._sender is not None and self._outbox is not None:
            self._outbox.put(_STOP)
            self._sender.join(min(self.timeout_s, 5.0))
        for s in {self.sock, self.out}:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
