"""`starfish certs`: the deployment's CA, the TLS certificates of party0, party1 and the dealer,
and the parties' erasure-signing certificates.

starfish certs --out DIR                      new CA + party0, party1, dealer TLS certificates
                                              + party0, party1 erasure-signing certificates
starfish certs --out DIR --issue dealer --ip 10.0.0.3
                                              new TLS key and certificate for one identity,
                                              signed by the CA already in DIR (rotation)
starfish certs --out DIR --rotate-signing party1
                                              new erasure-signing key for one party (the old
                                              pair is kept; what it signed stays verifiable)
"""

from __future__ import annotations

import argparse
from pathlib import Path

from starfish.errors import CommandError


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "certs", help="create the CA and the party and dealer certificates, or rotate a TLS or signing certificate"
    )
    p.add_argument(
        "--out", required=True, help="directory for ca.pem/ca.key, NAME.pem/NAME.key and partyN-signing.pem/.key"
    )
    p.add_argument("--ip", action="append", default=[], help="extra IP address for the certificates (repeatable)")
    p.add_argument("--host", action="append", default=[], help="extra DNS name for the certificates (repeatable)")
    p.add_argument(
        "--issue",
        metavar="NAME",
        action="append",
        default=[],
        help="only (re)issue the TLS certificate of identity NAME with the existing CA in --out (repeatable)",
    )
    p.add_argument(
        "--rotate-signing",
        metavar="PARTY",
        choices=("party0", "party1"),
        help="issue a new erasure-signing certificate and key for PARTY from the CA in --out (the old pair is kept)",
    )
    p.set_defaults(func=run)


def _require_ca(out: str, what: str) -> None:
    """Issuing from an existing CA needs its certificate and key in --out."""
    missing = [name for name in ("ca.pem", "ca.key") if not (Path(out) / name).is_file()]
    if missing:
        raise CommandError(
            f"{what} needs the CA in {out}, which lacks {' and '.join(missing)}; "
            f"create one with `starfish certs --out {out}`"
        )


def run(args: argparse.Namespace) -> int:
    from mpc.plane.certs import issue_cert, issue_signing_cert, make_certs

    if args.rotate_signing or args.issue:
        _require_ca(args.out, "--rotate-signing" if args.rotate_signing else "--issue")
    ips, hosts = ("127.0.0.1", *args.ip), ("localhost", *args.host)
    if args.rotate_signing:
        cert, key = issue_signing_cert(args.out, args.rotate_signing)
        print(f"{args.rotate_signing}_signing {cert}\n{args.rotate_signing}_signing_key {key}")
        print("restart the party to sign with the new key; certificates signed with the old one stay verifiable")
        return 0
    if args.issue:
        paths = {}
        for name in args.issue:
            paths[name], paths[f"{name}_key"] = issue_cert(args.out, name, ips, hosts)
    else:
        paths = make_certs(args.out, ips=ips, hosts=hosts)
    for name, path in sorted(paths.items()):
        print(f"{name:20s} {path}")
    return 0
