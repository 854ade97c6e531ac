"""The `starfish` command line: one sub-command per module of `starfish_cli/commands/`.

Each command module exposes `register(subparsers)` which adds its parser and sets
`func(args) -> int`. Commands import their heavy dependencies lazily so that
`starfish --help` stays fast.

Every error ends the command with one line on stderr, `starfish <command>: error: <why>`,
and exit status 1 (2 for a usage error, 130 on Ctrl-C), never a traceback: a
`CommandError` says why in the command's words, any other exception by its message.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import sys

from server.tls_floor import require_tls13
from starfish_cli.command_error import CommandError

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


DISTRIBUTION = "starfish-unlearning"  #: the package name of pyproject.toml
WIRE_CONTRACT = "starfish.v1"  #: the protobuf package of the gRPC contract (proto/starfish/v1)


def version() -> str:
    """`starfish --version`: the installed package version and the wire contract it speaks."""
    try:
        number = importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        number = "(not installed)"
    return f"starfish {number} (wire contract {WIRE_CONTRACT})"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="starfish", description="Privacy-preserving federated unlearning (Starfish, 2PC)"
    )
    parser.add_argument("--version", action="version", version=version())
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"starfish_cli.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"starfish_cli.commands.{name}":
                continue  # command not installed in this build
            raise
        module.register(sub)
    return parser


def one_line(exc: BaseException) -> str:
    """An exception's message on one line (its type when it has none)."""
    text = " ".join(str(exc).split())
    if isinstance(exc, OSError) and exc.strerror:
        text = f"{exc.filename}: {exc.strerror}" if exc.filename else exc.strerror
    return text or type(exc).__name__


def main(argv: list[str] | None = None) -> int:
    require_tls13()  # before the commands load gRPC: `starfish party` serves TLS 1.3 only (server.tls_floor)
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # the command line's last word: one line, never a traceback
        why = one_line(exc) if isinstance(exc, CommandError) else f"{one_line(exc)} ({type(exc).__name__})"
        print(f"starfish {args.command}: error: {why}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
