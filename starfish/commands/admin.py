"""`starfish admin`: operator commands against party0 (training status, start, erase).

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
    p = subparsers.add_parser("admin", help="operator commands (status, start-training, erase)")
    p.add_argument("--dir", default="run", help="deployment directory of `starfish up`")
    p.add_argument("--address", help="party0 address (overrides --dir)")
    p.add_argument("--ca", help="CA certificate (overrides --dir)")
    sub = p.add_subparsers(dest="admin_command", required=True)
    sub.add_parser("status", help="training status and round history")
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
        if args.admin_command == "status":
            reply = admin.status()
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
