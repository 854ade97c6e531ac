"""`starfish bench`: the benchmarks of `bench.table`, run by `python -m bench` (one table, one runner)."""

from __future__ import annotations

import argparse

from bench.table import BY_NAME


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("bench", help="run the benchmarks (JSON under bench/results/; python -m bench --help)")
    parser.add_argument("--quick", action="store_true", help="smaller sizes, finishes in minutes")
    parser.add_argument(
        "--only", action="append", default=None, metavar="NAME", help=f"run only these (of {', '.join(BY_NAME)})"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from bench.__main__ import main

    return main([*(["--quick"] if args.quick else []), *(args.only or [])], prog="starfish bench")
