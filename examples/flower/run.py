"""Run the Flower MNIST example against a local Starfish deployment, in one command:

    .venv/bin/python examples/flower/run.py [--clients 10] [--rounds 4] [--forget client0]

It starts party0 and party1 (TLS on loopback, rounds opened on request, each party with
its job worker; party0 spawns the dealer for the unlearning job), runs the Flower app on
Flower's Simulation Engine (Ray), prints the test accuracy per round before unlearning,
of the unlearned model and of the rounds after it, and stops the parties. Everything runs
in a network namespace with loopback only (`starfish_flower.sandbox`: Ray probes cloud
metadata addresses otherwise); `--no-isolation` runs it in the host's network.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import starfish_flower  # noqa: F401  (first: no telemetry leaves the machine)

HERE = Path(__file__).resolve().parent


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, default=10, help="virtual Flower clients (= Starfish clients)")
    p.add_argument("--fraction", type=float, default=0.5, help="fraction of clients sampled per round")
    p.add_argument("--rounds", type=int, default=4, help="rounds before unlearning")
    p.add_argument("--rounds-after", type=int, default=2, help="rounds after unlearning")
    p.add_argument("--forget", default="auto", help="client to unlearn: an id, auto (one of round 1) or none")
    p.add_argument("--dir", default=None, help="deployment directory, kept (default: a temporary one, removed)")
    p.add_argument("--no-isolation", action="store_true", help="do not run in a loopback-only network namespace")
    return p.parse_args(argv)


def isolated(argv: list[str]) -> int | None:
    """Re-run this script in a loopback-only network namespace; None when that is not possible."""
    from starfish_flower import offline, sandbox

    if sandbox.inside() or not sandbox.available():
        return None
    command = sandbox.loopback_only([sys.executable, str(Path(__file__).resolve()), *argv])
    return subprocess.run(command, env={**os.environ, **offline.SWITCHES}, check=False).returncode


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse(argv)
    if not args.no_isolation:
        code = isolated(argv)
        if code is not None:
            return code
        from starfish_flower import sandbox

        if not sandbox.inside():
            print("cannot create a network namespace: running in the host's network (Ray may probe cloud metadata)")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p)
    sys.path.insert(0, str(HERE))
    from flwr.simulation import run_simulation
    from mnist_app import Plan, make_client_app, make_server_app

    from harness.local import LocalDeployment
    from starfish_flower import Parties

    root = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="starfish-flower-"))
    dep = LocalDeployment(
        root / "deployment",
        clients=[f"client{i}" for i in range(args.clients)],
        rounds={"opening": "on_request", "deadline_s": 600.0},
        jobs={"standby": "always"},
    )
    os.environ.setdefault("STARFISH_OUTBOX", str(root / "outbox"))  # the clients' SDK outboxes (Ray inherits it)
    plan = Plan(args.rounds, args.rounds_after, args.fraction, forget=None if args.forget == "none" else args.forget)
    log: list[dict] = []
    started = time.time()
    dep.start()
    try:
        print(f"parties up: party0 {dep.address(0)}, party1 {dep.address(1)}; deployment in {dep.root}", flush=True)
        parties = Parties(dep.address(0), dep.address(1), dep.ca_cert)
        with dep.admin() as admin:
            run_simulation(
                make_server_app(plan, admin, log),
                make_client_app(parties, dep.cred_path),
                num_supernodes=args.clients,
                backend_config={"client_resources": {"num_cpus": 1}, "init_args": {"include_dashboard": False}},
            )
    finally:
        dep.stop()
        if not args.dir:  # a temporary deployment: its CA key and tokens do not outlive the run
            shutil.rmtree(root, ignore_errors=True)
    print_summary(log, started, time.time() - started)
    return 0 if any(e.get("succeeded") for e in log) or not plan.forget else 1


def print_summary(log: list[dict], started: float, seconds: float) -> None:
    print("\nphase              round  test loss  test accuracy  at (s)")
    for e in log:
        if "accuracy" in e:
            at = e["at"] - started
            print(f"{e['phase']:<18} {e['round']:>5}  {e['loss']:9.3f}  {100 * e['accuracy']:11.1f} %  {at:6.1f}")
        else:
            state = "succeeded" if e["succeeded"] else f"FAILED: {e['error']}"
            print(f"unlearning {e['target']} (job {e['job']}): {state}")
    print(f"total {seconds:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
