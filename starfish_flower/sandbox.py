"""Run a Flower simulation where nothing but loopback exists.

Ray's dashboard process probes cloud metadata services (an HTTP request to
169.254.169.254, a DNS lookup) even with usage statistics off, and no setting stops it. A
simulation that must not send anything off the machine — the example, the tests, the
benchmark — runs in a fresh network namespace (`unshare --net`, as root or through a user
namespace) whose only interface is loopback: the parties, Ray and Flower talk over
127.0.0.1 as before, and every other address is unreachable (the probes fail at once).
The run also gets its own PID namespace: when it ends or is killed, the kernel ends every
process it started (Ray's services, actors, the parties), so none outlives it.
"""

from __future__ import annotations

import os
import shutil
import subprocess

MARK = "STARFISH_LOOPBACK_ONLY"  #: set inside the namespace


def inside() -> bool:
    return os.environ.get(MARK) == "1"


def available() -> bool:
    """Whether this machine lets us create a network namespace (root or user namespaces)."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return False
    probe = subprocess.run(loopback_only(["true"]), capture_output=True, check=False, timeout=30)
    return probe.returncode == 0


def loopback_only(command: list[str]) -> list[str]:
    """`command` run in a new network namespace with loopback up and nothing else, and in a
    new PID namespace (with its own /proc) that dies with it."""
    script = 'ip link set lo up && exec env STARFISH_LOOPBACK_ONLY=1 "$@"'
    isolation = ["--net", "--pid", "--fork", "--kill-child", "--mount-proc", "--map-root-user"]
    return ["unshare", *isolation, "sh", "-c", script, "sh", *command]
