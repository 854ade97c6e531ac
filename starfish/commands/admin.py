"""`starfish admin`: operator commands against party0 (training status, start, erase, unlearn).

Connection settings come from the deployment directory written by `starfish up`
(`--dir`), or from `--address`, `--ca` and the token in $STARFISH_ADMIN_TOKEN.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path


def register(subparsers) -> None:
    p = subparsers.add_parser("admin", help="operator commands (status, start-training, unlearn, result, erase)")
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
    rs = sub.add_parser("result", help="a finished job's report summary; --out writes report.json and model.npy")
    rs.add_argument("job")
    rs.add_argument("--out", help="directory for report.json and model.npy")
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
    from server.local import LocalDeployment

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
        print(f"wrote {out / 'report.json'} and {out / 'model.npy'}")
    return 0
