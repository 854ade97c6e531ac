"""`starfish admin`: operator commands against party0 (training status, start, erase, unlearn,
the job list, cancelling a job, a job's result, its signed erasure certificate and its HTML
report page).

Connection settings come from the deployment directory written by `starfish up`
(`--dir`), or from `--address`, `--ca` and the token in $STARFISH_ADMIN_TOKEN; these and
`--json` may stand before or after the subcommand. Replies print as readable lines
(`starfish_cli.admin_view`), or as JSON with `--json`. The CA certificate also verifies the
erasure certificate before anything is written.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from starfish_cli.command_error import CommandError

CONNECTION_HELP = {
    "--dir": "deployment directory of `starfish up` (default run)",
    "--address": "party0's admin API address, its admin_listen (overrides --dir)",
    "--ca": "CA certificate (overrides --dir)",
}


def _common_options(parser: argparse.ArgumentParser, with_defaults: bool) -> None:
    """--dir, --address, --ca and --json: on `admin` itself (with the defaults) and on every
    admin subcommand (without, so a value given before the subcommand is kept)."""
    default = (lambda value: value) if with_defaults else (lambda value: argparse.SUPPRESS)
    parser.add_argument("--dir", default=default("run"), help=CONNECTION_HELP["--dir"])
    parser.add_argument("--address", default=default(None), help=CONNECTION_HELP["--address"])
    parser.add_argument("--ca", default=default(None), help=CONNECTION_HELP["--ca"])
    parser.add_argument(
        "--json", action="store_true", default=default(False), help="print the reply as JSON (for scripts)"
    )


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "admin",
        help="operator commands (status, jobs, start-training, unlearn, cancel, result, certificate, report, erase)",
    )
    _common_options(p, with_defaults=True)
    common = argparse.ArgumentParser(add_help=False)
    _common_options(common, with_defaults=False)
    sub = p.add_subparsers(dest="admin_command", required=True)

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help_text, parents=[common])

    stp = command("status", "training status and round history, or a job's status (--job)")
    stp.add_argument("--job", help="job id: show this unlearning job's status")
    command("jobs", "list the unlearning jobs: state, progress, elapsed time, step or error")
    un = command("unlearn", "file an unlearning request (prints the job id)")
    un.add_argument("targets", nargs="+", help="client id(s) to forget")
    un.add_argument("--strategy", default="starfish")
    un.add_argument("--params", default="{}", help='strategy parameters as JSON, e.g. \'{"sigma": 0.6, "B": 2}\'')
    un.add_argument("--wait", action="store_true", help="follow the job until it ends")
    ca = command("cancel", "cancel a queued or running job (workers stopped, training resumed)")
    ca.add_argument("job")
    rs = command("result", "a finished job's report summary; --out writes report.json, certificate.json and model.npy")
    rs.add_argument("job")
    rs.add_argument("--out", help="directory for report.json, certificate.json and model.npy")
    ce = command("certificate", "fetch a job's signed erasure certificate, verify it and save it")
    ce.add_argument("job")
    ce.add_argument("--out", default="certificate.json", help="file to write (default certificate.json)")
    rp = command("report", "a job's report as a self-contained HTML page (with its verified certificate)")
    rp.add_argument("job")
    rp.add_argument("--html", required=True, help="HTML file to write")
    rp.add_argument("--certificate-out", help="also save the certificate to this file")
    st = command("start-training", "install the initial model M_0 (.npy, float) and start rounds")
    st.add_argument("--model", required=True, help=".npy file with the flat initial parameters")
    st.add_argument("--arch", required=True, help="architecture name")
    st.add_argument("--lr", type=float, required=True, help="learning rate eta_l")
    er = command("erase", "erase a client's shares on both parties")
    er.add_argument("client")
    p.set_defaults(func=run)


def _connect(args: argparse.Namespace):
    from client_sdk.admin import AdminClient

    if args.address:
        token = os.environ.get("STARFISH_ADMIN_TOKEN")
        if not token or not args.ca:
            raise CommandError("--address needs --ca and $STARFISH_ADMIN_TOKEN")
        return AdminClient(args.address, token, args.ca)
    from harness.local import LocalDeployment

    root = Path(args.dir)
    if not (root / "credentials.json").exists():
        raise CommandError(f"{root} holds no deployment (run `starfish up --dir {root}` first)")
    return LocalDeployment(root).admin()


def _load_model(path: str):
    """The initial model of `start-training`: a float .npy array (no pickled objects)."""
    import numpy as np

    try:
        params = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise CommandError(f"--model {path}: no such file") from None
    except (OSError, ValueError) as exc:
        raise CommandError(f"--model {path} is not a readable .npy array: {exc}") from None
    if not isinstance(params, np.ndarray) or params.dtype.kind not in "fiu":
        raise CommandError(f"--model {path} must hold a numeric array, got {getattr(params, 'dtype', type(params))}")
    return params


def _show(args: argparse.Namespace, reply) -> None:
    """Print a reply: readable lines, or JSON with --json."""
    from starfish_cli import admin_view

    print(json.dumps(admin_view.as_data(reply), indent=1) if args.json else admin_view.text(reply))


def run(args: argparse.Namespace) -> int:
    from client_sdk.errors import StarfishError

    model = _load_model(args.model) if args.admin_command == "start-training" else None
    admin = _connect(args)
    try:
        if args.admin_command in ("unlearn", "result"):
            return _jobs(admin, args)
        if args.admin_command in ("certificate", "report"):
            return _evidence(admin, args)
        if args.admin_command == "status":
            reply = admin.job_status(args.job) if args.job else admin.status()
        elif args.admin_command == "jobs":
            reply = admin.list_jobs()
        elif args.admin_command == "cancel":
            reply = admin.cancel_job(args.job)
        elif args.admin_command == "start-training":
            reply = admin.start_training(args.arch, model, args.lr)
        else:
            reply = admin.erase(args.client)
    except StarfishError as exc:
        raise CommandError(str(exc)) from None
    finally:
        admin.close()
    _show(args, reply)
    return 0


def _jobs(admin, args: argparse.Namespace) -> int:
    """`unlearn` and `result` (errors are raised as StarfishError to the caller)."""
    import numpy as np

    from proto.starfish.v1 import admin_pb2
    from starfish_cli import admin_view

    if args.admin_command == "unlearn":
        job_id = admin.unlearn(args.targets, args.strategy, args.params)  # party0 parses the JSON, once
        print(json.dumps({"job_id": job_id}) if args.json else job_id, flush=True)
        if not args.wait:
            return 0
        final = None
        for final in admin.watch_job(job_id):
            print(json.dumps(admin_view.as_data(final)) if args.json else admin_view.job_text(final), flush=True)
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
    from harness.report_page import render_page

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
