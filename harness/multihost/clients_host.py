"""The clients' host: the FL clients of a federation and the admin tool, as one process.

    python -m harness.multihost.clients_host --deployment ROOT --config demo.json train --out stage1.json
    python -m harness.multihost.clients_host --deployment ROOT --config demo.json unlearn --out DIR

runs inside the clients' namespace of a lab. The federation is `DemoConfig.simulation()`'s
(same data, partition and data orders in every process). `train`: every client enrols and
runs the Stage I rounds through the SDK (`harness.demo.stage1.train`, which also installs
M_0 with the admin RPC). `unlearn`: the clients except the targets answer warm-up and
correction tasks while the admin files "unlearn the targets with Starfish" and follows the
job (`harness.demo.unlearn.via_admin`); the report, the model and the outcome (wall time,
status stream) are written to DIR. Progress goes to stdout; the exit status is 0 on success,
1 with the error in the outcome file otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.multihost.recipe import Recipe


@dataclass
class RemoteDeployment:
    """Connections to the parties of a rendered recipe (addresses from their configs)."""

    recipe: Recipe

    def client(self, client_id: str, **kwargs: Any):
        from client_sdk import Client

        r = self.recipe
        token = r.creds["clients"][client_id]
        return Client(client_id, token, r.address("party0"), r.address("party1"), r.ca_cert, **kwargs)

    def admin(self):
        from client_sdk.admin import AdminClient

        admin = str(self.recipe.config("party0")["admin_listen"])  # party0's admin API, its own listener
        return AdminClient(admin, self.recipe.creds["admin_token"], self.recipe.ca_cert)


@dataclass
class _Services:
    """What `harness.demo.stage1.train` needs of the services (they run on other hosts)."""

    deployment: RemoteDeployment

    def check_alive(self) -> None:
        """The services' processes are watched by whoever started them."""


def command(recipe: Recipe, config_path: Path, mode: str, out: Path) -> list[str]:
    """The command line of this process for `mode` ("train" or "unlearn")."""
    argv = [sys.executable, "-m", "harness.multihost.clients_host", "--deployment", str(recipe.root)]
    return [*argv, "--config", str(config_path), mode, "--out", str(out)]


def _say(line: str) -> None:
    print(line.strip(), flush=True)


def load(root: Path, config_path: Path) -> tuple[RemoteDeployment, Any]:
    from harness.demo.demo_config import DemoConfig

    recipe = Recipe(Path(root))
    recipe.creds = json.loads((recipe.root / "credentials.json").read_text())
    return RemoteDeployment(recipe), DemoConfig(**json.loads(Path(config_path).read_text()))


def train(dep: RemoteDeployment, cfg: Any, out: Path) -> None:
    import torch

    from evaluation.models import initial_model
    from evaluation.simulator import build_federation
    from harness.demo.fleet import Fleet
    from harness.demo.stage1 import train as stage1

    torch.set_num_threads(1)
    fed = build_federation(cfg.simulation())
    fleet = Fleet(fed, dep.client)
    try:
        m0 = initial_model(fed.config.architecture, fed.config.seed)
        result = stage1(_Services(dep), fleet, m0, cfg.rounds, _say, cfg.round_deadline_s * cfg.rounds)
    finally:
        fleet.close()
    out.write_text(
        json.dumps(
            {
                "seconds": result.seconds,
                "model_hashes": result.model_hashes,
                "client_bytes": result.client_bytes,
                "peer_bytes": result.peer_bytes,
            }
        )
    )


def unlearn(dep: RemoteDeployment, cfg: Any, out: Path) -> None:
    import torch

    from evaluation.simulator import build_federation
    from harness.demo.fleet import Fleet
    from harness.demo.unlearn import via_admin

    torch.set_num_threads(1)
    fed = build_federation(cfg.simulation())
    fleet = Fleet(fed, dep.client)
    try:
        fleet.serve_tasks(exclude=fed.targets)
        outcome = via_admin(dep, fed.targets, cfg.unlearning_params, _say, cfg.job_timeout_s)
        answered = fleet.tasks_answered
    finally:
        fleet.close()
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(outcome.report))
    (out / "certificate.json").write_text(outcome.certificate_json)
    np.save(out / "model.npy", outcome.model.numpy(), allow_pickle=False)
    record = {"ok": True, "seconds": outcome.seconds, "job_id": outcome.job_id, "model_hash": outcome.model_hash}
    (out / "outcome.json").write_text(json.dumps({**record, "statuses": outcome.statuses, "tasks_answered": answered}))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.multihost.clients_host")
    parser.add_argument("--deployment", required=True, type=Path, help="root of the rendered recipe")
    parser.add_argument("--config", required=True, type=Path, help="DemoConfig as JSON")
    parser.add_argument("mode", choices=("train", "unlearn"))
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    dep, cfg = load(args.deployment, args.config)
    start = time.perf_counter()
    try:
        (train if args.mode == "train" else unlearn)(dep, cfg, args.out)
    except Exception as exc:  # noqa: BLE001 - the caller reads the outcome file; the traceback goes to stderr
        import traceback

        traceback.print_exc()
        if args.mode == "unlearn":
            args.out.mkdir(parents=True, exist_ok=True)
            error = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "seconds": time.perf_counter() - start}
            (args.out / "outcome.json").write_text(json.dumps(error))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
