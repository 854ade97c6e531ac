"""`starfish certs --out DIR`: a local CA and TLS certificates for party0 and party1."""

from __future__ import annotations

import argparse


def register(subparsers) -> None:
    p = subparsers.add_parser("certs", help="create a local CA and party certificates (demo / one machine)")
    p.add_argument("--out", required=True, help="directory for ca.pem, partyN.pem and their keys")
    p.add_argument("--ip", action="append", default=[], help="extra IP address for the certificates (repeatable)")
    p.add_argument("--host", action="append", default=[], help="extra DNS name for the certificates (repeatable)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from server.certs import make_certs

    paths = make_certs(args.out, ips=("127.0.0.1", *args.ip), hosts=("localhost", *args.host))
    for name, path in sorted(paths.items()):
        print(f"{name:12s} {path}")
    return 0
