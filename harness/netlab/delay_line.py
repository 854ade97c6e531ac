"""A user-space delay line between two interfaces: every frame waits `delay` before it is
passed on, in each direction (the kernel here has no `netem` qdisc).

    python -m harness.netlab.delay_line IFACE_A IFACE_B --delay-us 10000 --stats stats.json

runs inside the switch namespace of a lab (`harness.netlab.lab`), between a host's link `l<i>` and
its bridge port pair `d<i>`. Frames are read and written with AF_PACKET sockets carrying
the virtio-net header (PACKET_VNET_HDR), so large GSO frames and checksum-offload state pass
through unchanged; the relay never parses, alters or reorders a frame. Each direction is a
FIFO of (due time, frame): a frame read at t leaves at t + delay. The queue is bounded
(`--queue-bytes`, like a router's buffer): a frame that does not fit is dropped and counted.

Timing: the process asks for SCHED_FIFO priority (root), so a loaded machine does not add
its scheduling latency to the link; `--stats` records how late frames really left (the
check that the emulation holds) together with frame, byte and drop counts, written when the
process gets SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import select
import signal
import socket
import sys
import time
from pathlib import Path

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_VNET_HDR = 15
PACKET_IGNORE_OUTGOING = 23
SO_RCVBUFFORCE = 33
SO_SNDBUFFORCE = 32
SOCKET_BUFFER = 32 << 20
MAX_FRAME = 1 << 17  #: a GSO frame is at most 64 KiB plus headers
RT_PRIORITY = 20


def open_port(iface: str) -> socket.socket:
    """A non-blocking raw socket on `iface` that sees incoming frames only, with vnet headers."""
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    s.setsockopt(SOL_PACKET, PACKET_VNET_HDR, 1)
    s.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
    s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, SOCKET_BUFFER)
    s.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, SOCKET_BUFFER)
    s.bind((iface, 0))
    s.setblocking(False)
    return s


class Direction:
    """Frames read on `src`, each written to `dst` `delay_ns` after it was read."""

    def __init__(self, src: socket.socket, dst: socket.socket, delay_ns: int, queue_bytes: int) -> None:
        self.src, self.dst = src, dst
        self.delay_ns, self.queue_bytes = delay_ns, queue_bytes
        self.queue: collections.deque[tuple[int, bytes]] = collections.deque()
        self.queued = 0
        self.frames = self.bytes = self.dropped = self.send_errors = 0
        self.lateness_us: list[float] = []

    def read(self, now: int) -> None:
        """Queue every frame waiting on the source socket (drop what exceeds the buffer)."""
        while True:
            try:
                frame = self.src.recv(MAX_FRAME)
            except BlockingIOError:
                return
            if self.queued + len(frame) > self.queue_bytes:
                self.dropped += 1
                continue
            self.queue.append((now + self.delay_ns, frame))
            self.queued += len(frame)

    def due(self) -> int | None:
        return self.queue[0][0] if self.queue else None

    def flush(self, now: int) -> None:
        """Send every frame whose time has come, in arrival order."""
        while self.queue and self.queue[0][0] <= now:
            due, frame = self.queue.popleft()
            self.queued -= len(frame)
            try:
                self.dst.send(frame)
            except OSError:  # e.g. the outgoing link is down: the frame is lost, as on a wire
                self.send_errors += 1
                continue
            self.frames += 1
            self.bytes += len(frame)
            if len(self.lateness_us) < 200_000:
                self.lateness_us.append((time.monotonic_ns() - due) / 1e3)

    def stats(self) -> dict[str, float | int]:
        late = sorted(self.lateness_us)
        pick = (lambda q: late[min(len(late) - 1, int(q * len(late)))]) if late else (lambda q: 0.0)
        return {
            "frames": self.frames,
            "bytes": self.bytes,
            "dropped": self.dropped,
            "send_errors": self.send_errors,
            "late_us_median": round(pick(0.5), 1),
            "late_us_p99": round(pick(0.99), 1),
            "late_us_max": round(late[-1], 1) if late else 0.0,
        }


def relay(
    sa: socket.socket, sb: socket.socket, delay_ns: int, queue_bytes: int, stop: list[bool]
) -> tuple[Direction, Direction]:
    """Run the delay line between two open ports until stop[0] is set; returns (a→b, b→a)."""
    directions = {
        sa.fileno(): Direction(sa, sb, delay_ns, queue_bytes),
        sb.fileno(): Direction(sb, sa, delay_ns, queue_bytes),
    }
    fds = list(directions)
    while not stop[0]:
        dues = [d for d in (x.due() for x in directions.values()) if d is not None]
        timeout = 1.0 if not dues else max(0.0, (min(dues) - time.monotonic_ns()) / 1e9)
        # select, not epoll: its timeout has microsecond resolution (epoll's is 1 ms)
        readable, _, _ = select.select(fds, [], [], min(timeout, 1.0))
        now = time.monotonic_ns()
        for fd in readable:
            directions[fd].read(now)
        now = time.monotonic_ns()
        for d in directions.values():
            d.flush(now)
    fwd, back = directions[sa.fileno()], directions[sb.fileno()]
    return fwd, back


def realtime() -> bool:
    """Ask for SCHED_FIFO so the machine's load does not delay frames (root only)."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(RT_PRIORITY))
    except (PermissionError, OSError):
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.netlab.delay_line", description=__doc__.split("\n")[0])
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--delay-us", type=float, required=True, help="one-way delay added in each direction")
    parser.add_argument("--queue-bytes", type=int, default=64 << 20, help="buffer per direction; beyond it frames drop")
    parser.add_argument("--stats", type=Path, help="write counters and lateness here on exit (JSON)")
    args = parser.parse_args(argv)
    if args.delay_us < 0:
        parser.error("--delay-us must be >= 0")
    stop = [False]
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.__setitem__(0, True))
    rt = realtime()
    ports = open_port(args.a), open_port(args.b)
    print("ready", flush=True)
    fwd, back = relay(*ports, int(args.delay_us * 1000), args.queue_bytes, stop)
    if args.stats is not None:
        out = {
            "a": args.a,
            "b": args.b,
            "delay_us": args.delay_us,
            "realtime": rt,
            "a_to_b": fwd.stats(),
            "b_to_a": back.stats(),
        }
        tmp = args.stats.with_suffix(".tmp")
        tmp.write_text(json.dumps(out, indent=1))
        tmp.replace(args.stats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
