"""Free TCP ports for processes on this machine (a session's rendezvous, a local deployment).

A port is picked at random *below* the kernel's ephemeral range
(`/proc/sys/net/ipv4/ip_local_port_range`), checked by binding it once, and never handed out
twice by this process. Below that range no outgoing connection can take the port between
the pick and the moment the process it is meant for binds it: a port the OS itself picks
with bind(0) lies inside the ephemeral range, where any client connection on the machine
may be given the same number as its local port in the meantime (EADDRINUSE at start-up).
Without a readable range it falls back to bind(0).

Numpy- and torch-free, so the party runtime and the CLI can pick ports without loading torch.
"""

from __future__ import annotations

import secrets
import socket
import threading
from pathlib import Path

LOOPBACK = "127.0.0.1"
PORT_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST = 10_000  #: ports below this are left to configured services
ATTEMPTS = 200
_issued: set[int] = set()
_lock = threading.Lock()


def below_ephemeral() -> tuple[int, int] | None:
    """[LOWEST, first ephemeral port), or None when the range is unknown or leaves no room."""
    try:
        low = int(PORT_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return (LOWEST, low) if low - LOWEST >= 1_000 else None


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port on `host` that was free a moment ago and that this process has not handed
    out before (module docstring); a caller that binds it later must still expect another
    listener to have taken it meanwhile."""
    span = below_ephemeral()
    with _lock:
        for _ in range(ATTEMPTS if span else 0):
            port = span[0] + secrets.randbelow(span[1] - span[0])
            if port not in _issued and _bindable(host, port):
                _issued.add(port)
                return port
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = int(s.getsockname()[1])
        _issued.add(port)
        return port
