"""`starfish demo`: the whole system on this machine in one command (`make demo`).

Starts the dealer, party0 and party1 as processes, trains the paper's MNIST CNN with
simulated SDK clients (one of them backdoored) through the service, files an unlearn
request with the admin RPC, follows the job, and prints TER / BA-ASR / MIA-ASR before
unlearning, after Starfish-2PC and for a plaintext retrain, with time and bytes per step.
Writes report.json, metrics.png, unlearning-costs.png and the process logs to --out.
Exit status 0 on success, 1 with a message naming the failed step otherwise; the
processes are stopped in every case.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path

DEFAULT_OUT = "demo-out"


def register(subparsers) -> None:
    from harness.demo.demo_config import DemoConfig

    d = DemoConfig()
    p = subparsers.add_parser(
        "demo",
        help="run the whole system locally: training, a backdoored client, unlearning under 2PC",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--out", type=Path, default=Path(DEFAULT_OUT), help=f"output directory (default {DEFAULT_OUT}/)")
    p.add_argument("--clients", type=int, default=d.num_clients, help=f"number of clients (default {d.num_clients})")
    p.add_argument("--rounds", type=int, default=d.rounds, help=f"stored Stage I rounds T (default {d.rounds})")
    p.add_argument(
        "--dataset",
        choices=("mnist5k", "mnist", "digits"),
        default=d.dataset,
        help=f"data set (default {d.dataset}: the 5,000-image MNIST subset)",
    )
    p.add_argument("--architecture", default=d.architecture, help=f"model (default {d.architecture}, the paper's CNN)")
    p.add_argument("--local-epochs", type=int, default=d.local_epochs)
    p.add_argument("--lr", type=float, default=d.lr, help=f"local learning rate η_l (default {d.lr})")
    p.add_argument("--max-train-samples", type=int, default=d.max_train_samples, help="> 0: train on a random subset")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="Starfish parameter of the unlearn request (repeatable; VALUE parsed as JSON when it can be)",
    )
    p.add_argument(
        "--keep-deployment", action="store_true", help="keep the deployment directory (certificates, stores)"
    )
    p.set_defaults(func=run)


def _params(items: list[str], base: dict) -> dict:
    out = dict(base)
    for item in items:
        name, sep, raw = item.partition("=")
        if not sep or not name:
            raise ValueError(f"--param {item!r}: expected NAME=VALUE")
        try:
            out[name] = json.loads(raw)
        except json.JSONDecodeError:
            out[name] = raw
    return out


def _terminate(signum, _frame) -> None:
    raise SystemExit(128 + signum)  # unwinds through the demo, which stops its processes


def run(args: argparse.Namespace) -> int:
    from harness.demo.demo_config import DemoConfig
    from harness.demo.demo_run import DemoError, run_demo

    signal.signal(signal.SIGTERM, _terminate)
    try:
        d = DemoConfig()
        cfg = DemoConfig(
            dataset=args.dataset,
            architecture="digits_mlp"
            if args.dataset == "digits" and args.architecture == d.architecture
            else args.architecture,
            num_clients=args.clients,
            rounds=args.rounds,
            lr=args.lr,
            local_epochs=args.local_epochs,
            max_train_samples=args.max_train_samples,
            seed=args.seed,
            starfish=_params(args.param, d.starfish),
        )
        cfg.validate()
    except ValueError as exc:
        print(f"starfish demo: error: {exc}", file=sys.stderr)
        return 2
    try:
        run_demo(cfg, args.out, say=lambda line: print(line, flush=True), keep_deployment=args.keep_deployment)
    except DemoError as exc:
        print(
            f"\nstarfish demo: FAILED: {exc}\n(logs of the parties and the dealer: {args.out / 'logs'})",
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt:
        print("\nstarfish demo: interrupted; all processes stopped", file=sys.stderr)
        return 130
    print("\nstarfish demo: done")
    return 0
