"""`starfish certs`: key custody per operator. Each operator makes its own keys and sends only
certificate requests; the CA holder signs them and never sees a private key.

On the CA holder's machine (offline; may be any operator or a fourth party):
  starfish certs ca --dir CA                       new CA: CA/ca.pem (public), CA/ca.key
  starfish certs sign --ca CA --request party0.csr [--out party0.pem]
                                                   sign one request (prints what it certifies)
On each operator's host (party0 shown; the dealer omits --signing):
  starfish certs request --name party0 --dir /etc/starfish/certs --ip 10.20.0.10 --signing
                                                   party0.key + party0.csr, party0-signing.key + .csr
  starfish certs request ... --renew               renewal: new keys as NAME.next.key until installed
  starfish certs install --dir /etc/starfish/certs party0.pem party0-signing.pem
                                                   put the signed certificates beside their keys

One machine, one operator (`starfish up`, tests) — the same request/sign/install path in one directory:
  starfish certs --out DIR [--ip IP]               CA + party0, party1, dealer TLS + both parties' signing pairs
  starfish certs --out DIR --issue dealer          TLS rotation of one identity with the CA in DIR
  starfish certs --out DIR --rotate-signing party1 signing rotation (the old pair is kept)
"""

from __future__ import annotations

import argparse
from pathlib import Path

from starfish_cli.command_error import CommandError


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "certs", help="key custody: CA, certificate requests, signing, installing (or all on one machine)"
    )
    p.add_argument("--out", help="one-machine mode: directory for the CA and every identity's files")
    p.add_argument("--ip", action="append", default=[], help="extra IP address for the certificates (repeatable)")
    p.add_argument("--host", action="append", default=[], help="extra DNS name for the certificates (repeatable)")
    p.add_argument("--issue", metavar="NAME", action="append", default=[], help="only (re)issue NAME's TLS pair")
    p.add_argument("--rotate-signing", metavar="PARTY", choices=("party0", "party1"), help="new signing pair")
    p.set_defaults(func=run, step=None)
    steps = p.add_subparsers(dest="step")
    ca = steps.add_parser("ca", help="create the deployment's CA (on the CA holder's machine)")
    ca.add_argument("--dir", required=True, type=Path)
    req = steps.add_parser("request", help="make this operator's key(s) and certificate request(s)")
    req.add_argument("--name", required=True, help="this operator's identity: party0, party1 or dealer")
    req.add_argument("--dir", required=True, type=Path, help="where the keys stay (e.g. /etc/starfish/certs)")
    req.add_argument("--ip", dest="req_ip", action="append", default=[], help="this host's address (repeatable)")
    req.add_argument("--host", dest="req_host", action="append", default=[], help="this host's DNS name")
    req.add_argument("--signing", action="store_true", help="also the erasure-signing pair (parties)")
    req.add_argument("--renew", action="store_true", help="keep the keys in service; new keys as NAME.next.key")
    sign = steps.add_parser("sign", help="sign one certificate request with the CA")
    sign.add_argument("--ca", required=True, type=Path, help="directory holding ca.pem and ca.key")
    sign.add_argument("--request", required=True, type=Path)
    sign.add_argument("--out", dest="cert_out", type=Path, help="certificate file (default: the request's, .pem)")
    sign.add_argument("--days", type=float, help="validity (default 365; signing certificates 3 years)")
    inst = steps.add_parser("install", help="put signed certificates beside this host's keys")
    inst.add_argument("--dir", required=True, type=Path)
    inst.add_argument("certs", nargs="+", type=Path)


def _require_ca(out: str, what: str) -> None:
    """Issuing from an existing CA needs its certificate and key in --out."""
    missing = [name for name in ("ca.pem", "ca.key") if not (Path(out) / name).is_file()]
    if missing:
        raise CommandError(
            f"{what} needs the CA in {out}, which lacks {' and '.join(missing)}; "
            f"create one with `starfish certs --out {out}`"
        )


def run(args: argparse.Namespace) -> int:
    if args.step is not None:
        return _STEPS[args.step](args)
    if not args.out:
        raise SystemExit("starfish certs: give a step (ca, request, sign, install) or --out DIR for one machine")
    return _one_machine(args)


def _one_machine(args: argparse.Namespace) -> int:
    from mpc.plane.certificate_authority import issue_cert, issue_signing_cert, make_certs

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


def _ca(args: argparse.Namespace) -> int:
    from mpc.plane.certificate_authority import make_ca

    if (args.dir / "ca.key").exists():
        raise SystemExit(f"starfish certs ca: {args.dir / 'ca.key'} exists; refusing to replace a CA")
    cert, _ = make_ca(args.dir)
    print(f"CA {cert.subject.rfc4514_string()} valid until {cert.not_valid_after_utc:%Y-%m-%d}")
    print(f"send {args.dir / 'ca.pem'} to every operator; {args.dir / 'ca.key'} never leaves this machine")
    return 0


def _request(args: argparse.Namespace) -> int:
    from mpc.plane.cert_requests import make_request

    ips, hosts = tuple(args.req_ip) or ("127.0.0.1",), ("localhost", *args.req_host)
    for csr in make_request(args.dir, args.name, ips, hosts, signing=args.signing, renew=args.renew):
        print(f"send to the CA: {csr}")
    print(f"the private keys stay in {args.dir} (mode 0600)")
    return 0


def _sign(args: argparse.Namespace) -> int:
    from cryptography import x509

    from mpc.plane.certificate_authority import RequestRefused, sign_request

    try:
        pem = sign_request(args.ca, args.request.read_bytes(), valid_days=args.days)
    except RequestRefused as exc:
        raise SystemExit(f"starfish certs sign: refused {args.request}: {exc}") from None
    out = args.cert_out or args.request.with_suffix(".pem")
    out.write_bytes(pem)
    cert = x509.load_pem_x509_certificate(pem)
    print(f"signed {cert.subject.rfc4514_string()} until {cert.not_valid_after_utc:%Y-%m-%d}: {out}")
    return 0


def _install(args: argparse.Namespace) -> int:
    from mpc.plane.cert_requests import install_cert

    for path in args.certs:
        try:
            cert, key = install_cert(args.dir, path.read_bytes())
        except ValueError as exc:
            raise SystemExit(f"starfish certs install: {exc}") from None
        print(f"installed {cert} (key {key})")
    return 0


_STEPS = {"ca": _ca, "request": _request, "sign": _sign, "install": _install}
