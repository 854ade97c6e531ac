"""Where a measurement was taken and how: machine, load, date, command; JSON result files."""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import shlex
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"
CACHE_DIR = Path(__file__).resolve().parent / ".cache"
"""Trained histories reused between benchmarks (git-ignored; rebuilt when missing)."""


def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo (or the platform's processor string)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def load_average() -> list[float]:
    """1, 5 and 15 minute load averages (what `uptime` prints)."""
    return [round(x, 2) for x in os.getloadavg()]


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc), 0.0 when unavailable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def machine() -> dict[str, Any]:
    """Facts about this machine and software, stamped into every result."""
    import torch

    try:
        crypten_version = importlib.metadata.version("crypten")
    except importlib.metadata.PackageNotFoundError:  # the version is informative only
        crypten_version = "unavailable"
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "crypten": crypten_version,
        "platform": platform.platform(),
    }


def stamp(params: Mapping[str, Any]) -> dict[str, Any]:
    """Metadata of one measurement: UTC date, command, parameters, load before."""
    return {
        "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "command": " ".join(shlex.quote(a) for a in [Path(sys.argv[0]).name, *sys.argv[1:]]) or "python",
        "params": dict(params),
        "load_average_start": load_average(),
        "machine": machine(),
    }


def write_result(name: str, meta: dict[str, Any], figures: dict[str, Any]) -> dict[str, Any]:
    """Write bench/results/<name>.json ({"meta": ..., "figures": ...}) and return it."""
    meta = dict(meta)
    meta["load_average_end"] = load_average()
    from evaluation.experiment import json_ready

    out = json_ready({"benchmark": name, "meta": meta, "figures": figures})
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(out, indent=1, allow_nan=False))
    tmp.replace(path)
    return out


def read_result(name: str) -> dict[str, Any] | None:
    """bench/results/<name>.json, or None when that benchmark has not been run."""
    path = RESULTS_DIR / f"{name}.json"
    if not path.exists():
        return None
    return json.loads(path.read_text())


@contextmanager
def single_thread() -> Iterator[None]:
    """Run the block with one torch thread (as each party process does), then restore."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def peak_rss_bytes(pid: int) -> int:
    """The peak resident memory (VmHWM) of a running process, in bytes; 0 if not reported."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0
