"""`starfish up`: run the whole service on this machine — the dealer (when this build has
one), party0 and party1 as separate processes on loopback with free ports, with
certificates, credentials and data under one directory. Stops all on Ctrl-C / SIGTERM.
"""

from __future__ import annotations

import argparse
import importlib.util
import signal
import subprocess
import sys
import threading


def register(subparsers) -> None:
    p = subparsers.add_parser("up", help="start dealer, party0 and party1 locally (Ctrl-C stops them)")
    p.add_argument("--dir", default="run", help="deployment directory (created; reused when it exists)")
    p.add_argument("--clients", type=int, default=20, help="number of client credentials to create")
    p.add_argument("--deadline", type=float, default=60.0, help="round deadline in seconds")
    p.set_defaults(func=run)


def _start_dealer(root, port: int) -> subprocess.Popen | None:
    """Start `starfish dealer` (sessions on PORT, PORT+1, ... until stopped) when the MPC
    dealer is part of this build."""
    if importlib.util.find_spec("mpc.dealer") is None:
        return None
    with open(root / "logs" / "dealer.log", "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "starfish.cli", "dealer", "--port", str(port), "--sessions", "0"],
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def run(args: argparse.Namespace) -> int:
    from server.local import LocalDeployment

    dep = LocalDeployment(
        args.dir, clients=[f"client{i}" for i in range(args.clients)], rounds={"deadline_s": args.deadline}
    )
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    (dep.root / "logs").mkdir(exist_ok=True)
    dealer = _start_dealer(dep.root, dep.creds["ports"]["dealer"])
    try:
        dep.start()
        print(f"party0 (leader, admin) on {dep.address(0)}")
        print(f"party1 (helper)        on {dep.address(1)}")
        print(
            f"dealer: {'rendezvous port ' + str(dep.creds['ports']['dealer']) if dealer else 'not part of this build'}"
        )
        if "metrics0" in dep.creds["ports"]:  # deployments made before metrics existed have none
            print(f"metrics: {dep.metrics_url(0)} and {dep.metrics_url(1)}")
        print(f"CA certificate: {dep.ca_cert}")
        print(f"credentials (admin and client tokens, keep private): {dep.cred_path}")
        print(f"logs: {dep.root / 'logs'}; Ctrl-C stops everything")
        while not stop.is_set():
            for role, proc in list(dep.procs.items()):
                if proc.poll() is not None:
                    print(f"party{role} exited with {proc.returncode}; stopping", file=sys.stderr)
                    stop.set()
            stop.wait(0.5)
    finally:
        dep.stop()
        if dealer is not None and dealer.poll() is None:
            dealer.terminate()
            try:
                dealer.wait(10)
            except subprocess.TimeoutExpired:
                dealer.kill()
        print("stopped")
    return 0
