"""`starfish admin`: operator commands against party0 (training status, start, erase, unlearn,
a job's result, its signed erasure certificate and its HTML report page).

Connection settings come from the deployment directory written by `starfish up`
(`--dir`), or from `--address`, `--ca` and the token in $STARFISH_ADMIN_TOKEN. The CA
certificate also verifies the erasure certificate before anything is written.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "admin", help="operator commands (status, start-training, unlearn, result, certificate, report, erase)"
    )
    p.add_argument("--dir", default="run", help="deployment directory of `starfish up`")
    p.add_argument("--address", help="party0 address (overrides --dir)")
    p.add_argument("--ca", help="CA certificate (overrides --dir)")
    sub = p.add_subparsers(dest="admin_command", required=True)
    stp = sub.add_parser("status", help="training status and round history, or a job's status (--job)")
    stp.add_argument("--job", help="job id: show this unlearning job's status")
    un = sub.add_parser("unlearn", help="file an unlearning request (prints the job id)")
    un.add_argument("targets", nargs="+", help="client id(s) to forget")
    un.add_argument("--strategy", default="starfish")
    un.add_argument("--params", default="{}", help='strategy parameters as JSON, e.g. \'{"sigma": 0.6, "B": 2}\'')
    un.add_argument("--wait", action="store_true", help="follow the job until it ends")
    rs = sub.add_parser(
        "result", help="a finished job's report summary; --out writes report.json, certificate.json and model.npy"
    )
    rs.add_argument("job")
    rs.add_argument("--out", help="directory for report.json, certificate.json and model.npy")
    ce = sub.add_parser("certificate", help="fetch a job's signed erasure certificate, verify it and save it")
    ce.add_argument("job")
    ce.add_argument("--out", default="certificate.json", help="file to write (default certificate.json)")
    rp = sub.add_parser("report", help="a job's report as a self-contained HTML page (with its verified certificate)")
    rp.add_argument("job")
    rp.add_argument("--html", required=True, help="HTML file to write")
    rp.add_argument("--certificate-out", help="also save the certificate to this file")
    st = sub.add_parser("start-training", help="install the initial model M_0 (.npy, float) and start rounds")
    st.add_argument("--model", required=True, help=".npy file with the flat initial parameters")
    st.add_argument("--arch", required=True, help="architecture name")
    st.add_argument("--lr", type=float, required=True, help="learning rate eta_l")
    er = sub.add_parser("erase", help="erase a client's shares on both parties")
    er.add_argument("client")
    p.set_defaults(func=run)


def _connect(args: argparse.Namespace):
    from client_sdk.admin import AdminClient

    if args.address:
        token = os.environ.get("STARFISH_ADMIN_TOKEN")
        if not token or not args.ca:
            raise SystemExit("error: --address needs --ca and $STARFISH_ADMIN_TOKEN")
        return AdminClient(args.address, token, args.ca)
    from starfish.local import LocalDeployment

    root = Path(args.dir)
    if not (root / "credentials.json").exists():
        raise SystemExit(f"error: {root} holds no deployment (run `starfish up --dir {root}` first)")
    return LocalDeployment(root).admin()


def run(args: argparse.Namespace) -> int:
    import numpy as np
    from google.protobuf.json_format import MessageToDict

    from client_sdk.errors import StarfishError

    admin = _connect(args)
    try:
        if args.admin_command in ("unlearn", "result"):
            return _jobs(admin, args)
        if args.admin_command in ("certificate", "report"):
            return _evidence(admin, args)
        if args.admin_command == "status":
            reply = admin.job_status(args.job) if args.job else admin.status()
        elif args.admin_command == "start-training":
            params = np.load(args.model, allow_pickle=False)
            reply = admin.start_training(args.arch, params, args.lr)
        else:
            reply = admin.erase(args.client)
    except StarfishError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        admin.close()
    print(json.dumps(MessageToDict(reply), indent=1))
    return 0


def _jobs(admin, args: argparse.Namespace) -> int:
    """`unlearn` and `result` (errors are raised as StarfishError to the caller)."""
    import numpy as np
    from google.protobuf.json_format import MessageToDict

    from proto.starfish.v1 import admin_pb2

    if args.admin_command == "unlearn":
        try:
            params = json.loads(args.params)
        except json.JSONDecodeError as exc:
            print(f"error: --params is not valid JSON: {exc}", file=sys.stderr)
            return 2
        job_id = admin.unlearn(args.targets, args.strategy, params)
        print(job_id)
        if not args.wait:
            return 0
        final = None
        for final in admin.watch_job(job_id):
            print(json.dumps(MessageToDict(final)), flush=True)
        return 0 if final is not None and final.state == admin_pb2.JOB_STATE_SUCCEEDED else 1
    report = admin.job_report(args.job)
    print(report.summary, end="")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.json").write_text(report.report_json)
        _, params = admin.job_model(args.job)
        np.save(out / "model.npy", params, allow_pickle=False)
        certificate = admin.job_certificate(args.job)
        if certificate.certificate_json:
            (out / "certificate.json").write_text(certificate.certificate_json)
        print(
            f"wrote {out / 'report.json'}, {out / 'model.npy'}"
            + (" and certificate.json" if certificate.certificate_json else "")
        )
    return 0


def _ca_path(args: argparse.Namespace) -> Path:
    return Path(args.ca) if args.ca else Path(args.dir) / "certs" / "ca.pem"


def _evidence(admin, args: argparse.Namespace) -> int:
    """`certificate` (verify and save) and `report --html` (the page, with the verification status)."""
    from client_sdk.evidence import check_certificate
    from starfish.report_page import render_page

    reply = admin.job_certificate(args.job)
    check = check_certificate(reply.certificate_json, [_ca_path(args)]) if reply.certificate_json else None
    target = args.out if args.admin_command == "certificate" else args.certificate_out
    if target and reply.certificate_json:
        Path(target).write_text(reply.certificate_json)
        print(f"wrote {target}")
    if args.admin_command == "certificate":
        if check is None:
            print(f"error: job {args.job} has no erasure certificate ({reply.status}): {reply.detail}", file=sys.stderr)
            return 1
        print("\n".join(check.explain()))
        return 0 if check.valid else 1
    report = json.loads(admin.job_report(args.job).report_json)
    Path(args.html).write_text(render_page(report, check, certificate_file=Path(target or "certificate.json").name))
    state = "no certificate" if check is None else ("certificate verified" if check.valid else "certificate REFUSED")
    print(f"wrote {args.html} ({state})")
    return 0
