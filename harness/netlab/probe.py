"""Measure what an emulated link really does: TCP round-trip time and throughput.

    python -m harness.netlab.probe serve --bind 10.20.0.11 --port 7000      (in one host)
    python -m harness.netlab.probe measure --to 10.20.0.11 --port 7000      (in another; prints JSON)

`measure` opens one connection and times `--pings` one-byte exchanges (TCP_NODELAY on
both ends), then a second one and sends `--bytes` bytes, timing until the server
acknowledges the count it received. The server handles one connection at a time until it
is stopped (SIGTERM). Nothing here is a secret: the payload is zeros.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import time

CHUNK = 1 << 20


def _serve_one(conn: socket.socket) -> None:
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    kind = conn.recv(1)
    if kind == b"p":
        while (byte := conn.recv(1)) != b"":
            conn.sendall(byte)
    elif kind == b"t":
        total = 0
        while data := conn.recv(CHUNK):
            total += len(data)
        conn.sendall(str(total).encode())


def serve(bind: str, port: int) -> None:
    with socket.create_server((bind, port), reuse_port=False) as server:
        while True:
            conn, _ = server.accept()
            with conn:
                _serve_one(conn)


def rtt_ms(host: str, port: int, pings: int, timeout_s: float = 30.0) -> list[float]:
    """`pings` one-byte round trips over one TCP connection, in milliseconds."""
    out = []
    with socket.create_connection((host, port), timeout=timeout_s) as conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.sendall(b"p")
        for _ in range(pings):
            start = time.perf_counter()
            conn.sendall(b"x")
            if conn.recv(1) != b"x":
                raise ConnectionError("probe server closed the connection")
            out.append((time.perf_counter() - start) * 1e3)
            time.sleep(0.002)
    return out


def throughput_mbit(host: str, port: int, nbytes: int, timeout_s: float = 120.0) -> float:
    """Send `nbytes` and time until the server confirms it received them all (Mbit/s)."""
    buf = bytes(CHUNK)
    with socket.create_connection((host, port), timeout=timeout_s) as conn:
        conn.sendall(b"t")
        start = time.perf_counter()
        sent = 0
        while sent < nbytes:
            n = min(CHUNK, nbytes - sent)
            conn.sendall(buf[:n])
            sent += n
        conn.shutdown(socket.SHUT_WR)
        got = int(conn.recv(64) or b"0")
        seconds = time.perf_counter() - start
    if got != nbytes:
        raise ConnectionError(f"probe server received {got} of {nbytes} bytes")
    return nbytes * 8 / seconds / 1e6


def measure(host: str, port: int, pings: int, nbytes: int) -> dict[str, float]:
    """RTT (min, median, p90 over `pings`) and throughput of one `nbytes` transfer."""
    rtts = sorted(rtt_ms(host, port, pings))
    return {
        "rtt_ms_min": round(rtts[0], 3),
        "rtt_ms_median": round(statistics.median(rtts), 3),
        "rtt_ms_p90": round(rtts[int(0.9 * (len(rtts) - 1))], 3),
        "pings": pings,
        "throughput_mbit": round(throughput_mbit(host, port, nbytes), 1),
        "throughput_bytes": nbytes,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.netlab.probe")
    sub = parser.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--bind", required=True)
    s.add_argument("--port", type=int, required=True)
    m = sub.add_parser("measure")
    m.add_argument("--to", required=True)
    m.add_argument("--port", type=int, required=True)
    m.add_argument("--pings", type=int, default=50)
    m.add_argument("--bytes", type=int, default=20_000_000)
    args = parser.parse_args(argv)
    if args.cmd == "serve":
        serve(args.bind, args.port)
        return 0
    print(json.dumps(measure(args.to, args.port, args.pings, args.bytes)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
