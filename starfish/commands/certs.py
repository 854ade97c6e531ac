"""`starfish certs --out DIR`: a local CA, TLS certificates and erasure-signing certificates for
party0 and party1; `--rotate-signing partyN` issues a new signing key from the CA in DIR."""

from __future__ import annotations

import argparse


def register(subparsers) -> None:
    p = subparsers.add_parser("certs", help="create a local CA and party certificates, or rotate a signing key")
    p.add_argument("--out", required=True, help="directory for ca.pem, partyN.pem, partyN-signing.pem and their keys")
    p.add_argument("--ip", action="append", default=[], help="extra IP address for the certificates (repeatable)")
    p.add_argument("--host", action="append", default=[], help="extra DNS name for the certificates (repeatable)")
    p.add_argument(
        "--rotate-signing",
        metavar="PARTY",
        choices=("party0", "party1"),
        help="issue a new erasure-signing certificate and key for PARTY from the CA in --out (the old pair is kept)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from server.certs import issue_signing_cert, make_certs

    if args.rotate_signing:
        cert, key = issue_signing_cert(args.out, args.rotate_signing)
        print(f"{args.rotate_signing}_signing {cert}\n{args.rotate_signing}_signing_key {key}")
        print("restart the party to sign with the new key; certificates signed with the old one stay verifiable")
        return 0
    paths = make_certs(args.out, ips=("127.0.0.1", *args.ip), hosts=("localhost", *args.host))
    for name, path in sorted(paths.items()):
        print(f"{name:20s} {path}")
    return 0
