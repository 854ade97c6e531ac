"""`starfish party --role 0|1 --config F`: run one party server until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse


def register(subparsers) -> None:
    p = subparsers.add_parser("party", help="run party0 (leader) or party1 (helper)")
    p.add_argument("--role", type=int, choices=(0, 1), required=True)
    p.add_argument("--config", required=True, help="party TOML configuration")
    p.add_argument("--log-level", default="INFO")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from server.main import run_party

    return run_party(args.config, args.role, args.log_level)
