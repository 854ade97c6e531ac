"""The `starfish` command line: one sub-command per module of `starfish/commands/`.

Each command module exposes `register(subparsers)` which adds its parser and sets
`func(args) -> int`. Commands import their heavy dependencies lazily so that
`starfish --help` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys

#: command modules, in the order `--help` lists them
COMMANDS = (
    "demo",
    "party",
    "dealer",
    "up",
    "certs",
    "deploy",
    "preflight",
    "admin",
    "verify",
    "simulate",
    "bench",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="starfish", description="Privacy-preserving federated unlearning (Starfish, 2PC)"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"starfish.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"starfish.commands.{name}":
                continue  # command not installed in this build
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
