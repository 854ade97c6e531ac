"""Record every frame that enters the bridge of a lab (`tcpdump` in the switch namespace).

One capture listens on the "any" device of the switch namespace for incoming frames
(direction "in", no filter). The file is LINKTYPE_LINUX_SLL2 pcap, which records the
interface of every frame: `harness.netlab.flows.read_streams(path, capture.ifindexes)` keeps only
the frames that entered through a bridge port, so each frame a host sends counts exactly
once, whichever links are delayed. Start the capture after the link profile is applied
(the bridge ports differ between direct and delayed links).

tcpdump runs at real-time priority with a 256 MiB ring, so a loaded machine does not make
it drop frames; the snapshot length (70,000 bytes) covers a whole GSO frame (64 KiB plus
headers); `stop()` waits for the ring's last block to reach the file before stopping it.
Every filter is applied when reading: with libpcap 1.10 on the "any" device, in-kernel
`ifindex` and even `tcp` filters were seen to drop every matching frame.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Self

from harness.netlab.lab import SWITCH, Lab, LabError, stop_process

START_TIMEOUT_S = 20.0
SETTLE_S = 1.5
"""tcpdump hands the kernel's ring blocks to user space at the latest after its 1 s timeout."""
RT_PRIORITY = 10
SNAPLEN = 70_000
BUFFER_KIB = 256 * 1024


def tcpdump_missing() -> str | None:
    """Why no capture can be made here (None when tcpdump is installed)."""
    return None if shutil.which("tcpdump") else "tcpdump is not installed (deploy/setup.sh installs it as root)"


class Capture:
    """tcpdump on the bridge ports of `lab`, writing `path`; use as a context manager."""

    def __init__(self, lab: Lab, path: Path) -> None:
        self.lab = lab
        self.path = Path(path)
        self.proc: subprocess.Popen | None = None
        self.ifindexes: dict[int, str] = {}  #: bridge ports at start: interface index -> name
        self.stats: dict[str, Any] = {}

    def start(self) -> Capture:
        ports = self.lab.bridge_ports()
        if not ports:
            raise LabError("the bridge has no ports to capture on")
        self.ifindexes = {self.lab.ifindex(self.lab.switch, p): p for p in ports}
        argv = ["chrt", "-f", str(RT_PRIORITY), "tcpdump", "-i", "any", "-y", "LINUX_SLL2", "-Q", "in", "-n"]
        argv += ["-s", str(SNAPLEN), "-B", str(BUFFER_KIB), "-U", "-w", str(self.path)]
        self.proc = self.lab.popen(SWITCH, argv, stderr=subprocess.PIPE, text=True)
        assert self.proc.stderr is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        line = ""
        while "listening on" not in line:
            line = self.proc.stderr.readline()
            if not line or time.monotonic() > deadline:
                stop_process(self.proc)
                raise LabError(f"tcpdump did not start: {line.strip()}")
        return self

    def stop(self) -> dict[str, Any]:
        """Stop tcpdump (it flushes the file) and return its counters. tcpdump's "dropped by
        kernel" also counts frames it was not asked to keep; judge completeness by the
        streams (`Stream.gaps`, `Stream.isn`) instead."""
        if self.proc is None:
            return self.stats
        time.sleep(SETTLE_S)  # the ring's last, partly filled block reaches the file
        stop_process(self.proc, sig=signal.SIGINT)
        text = self.proc.stderr.read() if self.proc.stderr else ""
        self.proc = None
        for key, pattern in (
            ("captured", r"(\d+) packets? captured"),
            ("dropped", r"(\d+) packets? dropped by kernel"),
        ):
            m = re.search(pattern, text)
            self.stats[key] = int(m.group(1)) if m else None
        return self.stats

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
