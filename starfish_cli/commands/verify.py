"""`starfish verify CERT`: check an erasure certificate offline and say what it proves.

Needs only the certificate file and the CA certificate(s) that issued the parties'
signing certificates (`--ca`, or `--dir` of a local deployment). Exit status 0 when both
signatures verify (and `--model`, when given, is the unlearned model), 1 when the
certificate is refused or the model does not match (the mismatch is the first line), 2 for
a usage error (unreadable file, no CA).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "verify",
        help="verify an erasure certificate offline (both parties' signatures) and say what it proves",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("certificate", type=Path, help="certificate.json of a job")
    p.add_argument("--ca", action="append", default=[], help="trusted CA certificate (PEM; repeatable)")
    p.add_argument("--dir", type=Path, help="a local deployment directory: trust its certs/ca.pem")
    p.add_argument(
        "--party-cert",
        action="append",
        default=[],
        help="accept only these signing certificates (PEM; repeatable), e.g. party0-signing.pem and party1-signing.pem",
    )
    p.add_argument(
        "--model", type=Path, help="a .npy model file: check it is the unlearned model the certificate names"
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from client_sdk.errors import StarfishError
    from client_sdk.evidence import check_certificate, model_matches

    cas = [*args.ca, *([args.dir / "certs" / "ca.pem"] if args.dir else [])]
    if not cas:
        print("error: give the trusted CA certificate with --ca (or a deployment with --dir)", file=sys.stderr)
        return 2
    try:
        check = check_certificate(args.certificate, cas, args.party_cert)
        problems = list(check.problems)
        if args.model is not None and check.valid and not model_matches(check.statement, np.load(args.model)):
            problems.append(f"{args.model} is not the unlearned model the certificate names")
    except (OSError, StarfishError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"valid": not problems, "problems": problems, "proves": check.proves()}, indent=1))
        return 0 if not problems else 1
    mismatch = args.model is not None and check.valid and bool(problems)
    if mismatch:
        print(f"MODEL MISMATCH: {args.model} is not the unlearned model this certificate names")
        print("(the certificate's signatures verify; the model file is not the one they vouch for)")
    for line in check.explain():
        print(line)
    if args.model is not None and check.valid:
        print(f"model {args.model}: " + ("is the unlearned model" if not problems else problems[-1]))
    return 0 if not problems else 1
