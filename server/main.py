"""Entry point of a party process: `python -m party0 --config F` or `starfish party --role R --config F`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from server.config import ConfigError, load_config
from server.file_modes import restrict_umask
from server.tls_floor import require_tls13


def run_party(config_path: str | Path, role: int | None = None, log_level: str = "INFO") -> int:
    """Load the config (checking its role when given), then serve until SIGINT/SIGTERM."""
    require_tls13()  # before anything loads gRPC (server.tls_floor)
    from server import logs

    try:
        cfg = load_config(config_path)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if role is not None and cfg.role != role:
        print(f"error: config {config_path} is for party{cfg.role}, not party{role}", file=sys.stderr)
        return 2
    logs.configure(cfg.name, cfg.observability.log_format, log_level)
    restrict_umask()  # every file the party and its workers write: 0600 / 0700 (server.file_modes)
    from server.evidence.signing import SigningError
    from server.runtime import PartyServer  # heavy imports after argument checks

    try:
        server = PartyServer(cfg)
    except (OSError, SigningError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    server.run_until_signal()
    return 0


def main(role: int, argv: list[str] | None = None) -> int:
    here = Path(__file__).resolve().parent.parent / f"party{role}" / f"party{role}.toml"
    parser = argparse.ArgumentParser(prog=f"party{role}", description=f"Run Starfish party{role}")
    parser.add_argument("--config", default=str(here), help=f"TOML config (default {here})")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    return run_party(args.config, role, args.log_level)
