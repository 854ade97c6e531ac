"""`starfish up`: run the whole service on this machine — the dealer service, party0 and
party1 as three separate processes on loopback with free ports, with certificates,
credentials and data under one directory. Stops all on Ctrl-C / SIGTERM.

One operator runs all three here, so the dealer is not independent: job status and
reports say "single-operator demo: dealer not independent". A real deployment gives each
process to its own operator (docs/DEPLOY.md).

One `starfish up` at a time per directory: it holds an exclusive lock on `DIR/up.lock`
(released when it ends, however it ends); a second one on the same directory is refused
naming the process that holds it.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import signal
import sys
import threading
from pathlib import Path
from typing import IO

from starfish_cli.command_error import CommandError

LOCK_FILE = "up.lock"


def register(subparsers) -> None:
    p = subparsers.add_parser("up", help="start dealer, party0 and party1 locally (Ctrl-C stops them)")
    p.add_argument("--dir", default="run", help="deployment directory (created; reused when it exists)")
    p.add_argument("--clients", type=int, default=20, help="number of client credentials to create")
    p.add_argument("--deadline", type=float, default=60.0, help="round deadline in seconds")
    p.add_argument(
        "--opening",
        choices=("auto", "on_request"),
        default="auto",
        help="rounds open by themselves (auto) or when an FL server asks (on_request, e.g. a Flower strategy)",
    )
    p.set_defaults(func=run)


def _watch(dep, stop: threading.Event) -> None:
    while not stop.is_set():
        for name, proc in [*((f"party{r}", p) for r, p in dep.procs.items()), ("dealer", dep.dealer_proc)]:
            if proc is not None and proc.poll() is not None:
                print(f"{name} exited with {proc.returncode}; stopping", file=sys.stderr)
                stop.set()
        stop.wait(0.5)


def claim(root: Path) -> IO[str]:
    """Create the deployment directory if needed and take its lock (held while the file is open)."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        lock = open(root / LOCK_FILE, "a+")  # held open while the command runs
    except OSError as exc:
        raise CommandError(f"cannot use {root} as the deployment directory: {exc.strerror or exc}") from None
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        holder = lock.read().strip() or "pid unknown"
        lock.close()
        raise CommandError(f"{root} is in use by another `starfish up` ({holder}); stop that one first") from None
    lock.seek(0)
    lock.truncate()
    lock.write(f"pid {os.getpid()}\n")
    lock.flush()
    return lock


def run(args: argparse.Namespace) -> int:
    from harness.local import LocalDeployment

    lock = claim(Path(args.dir))
    dep = LocalDeployment(
        args.dir,
        clients=[f"client{i}" for i in range(args.clients)],
        rounds={"deadline_s": args.deadline, "opening": args.opening},
    )
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        dep.start()
        print(f"party0 (leader)        on {dep.address(0)}, admin API on {dep.admin_address}")
        print(f"party1 (helper)        on {dep.address(1)}")
        print(f"dealer service         on {dep.dealer_address} (single-operator demo: dealer not independent)")
        if "metrics0" in dep.creds["ports"]:  # deployments made before metrics existed have none
            print(f"metrics: {dep.metrics_url(0)} and {dep.metrics_url(1)}")
        print(f"CA certificate: {dep.ca_cert}")
        print(f"credentials (admin and client tokens, keep private): {dep.cred_path}")
        print(f"logs: {dep.root / 'logs'}; Ctrl-C stops everything")
        _watch(dep, stop)
    finally:
        dep.stop()
        lock.close()
        print("stopped")
    return 0
