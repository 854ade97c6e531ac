"""`starfish preflight --config F`: check an operator's installation before starting it.

  starfish preflight --config /etc/starfish/party0.toml --user starfish
  starfish preflight --config /etc/starfish/dealer.toml --user starfish
  starfish preflight --config /etc/starfish/party0.toml --user starfish --no-bind   (service running)

Prints one row per check (PASS, WARN, FAIL and the reason) and exits 1 if any check
failed: config valid, certificates present, signed by the CA, naming the expected
identities, unexpired (WARN within --warn-days), keys readable only by the service user,
ports bindable, the other party and the dealer reachable with mutual TLS 1.3 and the
expected identities, the clock synchronized.
"""

from __future__ import annotations

import argparse
import os
import pwd
from pathlib import Path


def register(subparsers) -> None:
    p = subparsers.add_parser("preflight", help="check an operator's config, keys, ports and peers before starting")
    p.add_argument("--config", required=True, type=Path, help="the party's or the dealer's config file")
    p.add_argument("--user", help="the service user that must own the keys (default: the user running this)")
    p.add_argument("--warn-days", type=float, default=21.0, help="warn when a certificate expires sooner")
    p.add_argument("--timeout", type=float, default=5.0, help="seconds per connection to a peer")
    p.add_argument("--identity", default="dealer", help="a dealer's own identity (its certificate's common name)")
    p.add_argument("--no-reach", action="store_true", help="skip connecting to the peers (they are not up yet)")
    p.add_argument("--no-bind", action="store_true", help="skip the free-port checks (the service is running)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from starfish_cli.preflight.checks import FAIL
    from starfish_cli.preflight.run import Options, run_checks, table

    user = args.user or pwd.getpwuid(os.geteuid()).pw_name
    opts = Options(user, args.warn_days, args.timeout, args.identity, not args.no_reach, not args.no_bind)
    rows = run_checks(args.config, opts)
    print(table(rows))
    return 1 if any(r.status == FAIL for r in rows) else 0
