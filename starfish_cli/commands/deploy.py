"""`starfish deploy render`: one operator's bundle from the deployment description.

starfish deploy render --spec deploy/deployment.toml --role party0 --out bundle/
    bundle/party0.toml, party0.nft, starfish-party0.service, certs/party0.key + .csr,
    certs/party0-signing.key + .csr (send only the .csr files to the CA)
"""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers) -> None:
    p = subparsers.add_parser("deploy", help="render an operator's bundle from the deployment description")
    steps = p.add_subparsers(dest="step", required=True)
    render = steps.add_parser("render", help="config, unit, firewall and certificate requests of one role")
    render.add_argument("--spec", required=True, type=Path, help="the deployment description (TOML)")
    render.add_argument("--role", required=True, choices=("party0", "party1", "dealer"))
    render.add_argument("--out", required=True, type=Path, help="directory for the bundle")
    render.add_argument("--no-request", action="store_true", help="no new keys (config and firewall only)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from starfish_cli.deployment.bundle import render_bundle
    from starfish_cli.deployment.spec import SpecError, load

    try:
        spec = load(args.spec)
    except (OSError, SpecError) as exc:
        raise SystemExit(f"starfish deploy render: {exc}") from None
    for path in render_bundle(spec, args.role, args.out, request=not args.no_request):
        print(path)
    print(f"send {args.out / 'certs'}/*.csr to the CA; install with deploy/install.sh {args.role} {args.out}")
    return 0
