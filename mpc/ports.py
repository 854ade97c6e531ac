"""Free TCP ports for processes on this machine (a session's rendezvous, a local deployment).

Numpy- and torch-free, so the party runtime and the CLI can pick ports without loading torch.
"""

from __future__ import annotations

import socket

LOOPBACK = "127.0.0.1"


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port on `host` that was free a moment ago (the OS picks it); a caller that
    binds it later must retry on a new port when another process took it meanwhile."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
