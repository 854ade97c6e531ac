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


def wait_for_quiet(max_wait_s: float = 240.0, poll_s: float = 5.0) -> float:
    """Wait until the one-minute load average is at most 1 per core (what an earlier phase of
    the same run, e.g. Stage I's client threads, left behind has decayed), `max_wait_s` at
    most; returns the seconds waited."""
    start = time.monotonic()
    cores = os.cpu_count() or 1
    while os.getloadavg()[0] > cores and time.monotonic() - start < max_wait_s:
        time.sleep(poll_s)
    return round(time.monotonic() - start, 1)


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


FORCE_ENV = "STARFISH_BENCH_FORCE"
"""Set to 1 to measure on a busy machine anyway; the result is then marked `"loaded": true`."""
BUSY_MARKERS = ("pytest", "bench.", "-m bench", "starfish bench", "starfish_cli bench")


class MachineBusy(RuntimeError):
    """The machine is too busy for a measurement that can be believed."""


def busy_reasons(load: list[float], cores: int, others: list[str]) -> list[str]:
    """Why a measurement starting now would not be believable: a one-minute load average above
    one per core, or another benchmark or test run alive (`others`: their command lines)."""
    reasons = []
    if load[0] > cores:
        reasons.append(f"one-minute load average {load[0]:g} on {cores} cores (at most {cores} to measure)")
    reasons += [f"another run is alive: {cmd[:120]}" for cmd in others]
    return reasons


def other_runs() -> list[str]:
    """Command lines of the other live processes that are benchmarks or test runs (Linux /proc):
    Python interpreters running one. Wrappers are not (`flock` waiting for the shared lock —
    its run has not started — or `timeout`, `nice`, a shell): the interpreter they start is
    itself checked once it runs."""
    mine = {os.getpid(), os.getppid()}
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in mine:
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        cmd = b" ".join(argv).decode(errors="replace").strip()
        if Path(argv[0].decode(errors="replace")).name.startswith("python") and any(m in cmd for m in BUSY_MARKERS):
            found.append(cmd)
    return found


def stamp(params: Mapping[str, Any]) -> dict[str, Any]:
    """Metadata of one measurement: UTC date, command, parameters, load before. Refuses
    (MachineBusy) on a busy machine (`busy_reasons`) unless STARFISH_BENCH_FORCE=1, when the
    result is recorded with `"loaded": true` and the reasons."""
    load, cores = load_average(), os.cpu_count() or 1
    reasons = busy_reasons(load, cores, other_runs())
    if reasons and os.environ.get(FORCE_ENV) != "1":
        raise MachineBusy(
            "refusing to measure on a busy machine: " + "; ".join(reasons) + f" (set {FORCE_ENV}=1 to record it "
            'anyway, marked "loaded": true)'
        )
    return {
        "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "command": " ".join(shlex.quote(a) for a in [Path(sys.argv[0]).name, *sys.argv[1:]]) or "python",
        "params": dict(params),
        "load_average_start": load,
        "loaded": bool(reasons),
        "busy": reasons,
        "commit": _commit(),
        "machine": machine(),
    }


def _commit() -> str:
    """The checked-out commit (and "+dirty" with uncommitted changes), or "unknown"."""
    import subprocess

    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if head.returncode != 0:
        return "unknown"
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


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
