"""Render `deploy/` into a runnable deployment directory.

The recipe's files name production paths: configs under `/etc/starfish`, data under
`/var/lib/starfish`, the code under `/opt/starfish`. `render(root, clients)` copies each
config with those roots mapped into `root` (`root/etc`, `root/var`, this repository),
issues the deployment's certificates (one CA; one certificate per operator, valid for its
address), creates the admin and client tokens and writes their sha256 digests into the
`[auth]` tables of the parties, the steps docs/DEPLOY.md tells the operators to do by hand.
`Recipe.command(name)` is the `ExecStart=` line of that operator's systemd unit with the
same mapping, so the test and the benchmark run what the units run.
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mpc.plane.certs import make_certs
from server.config import token_digest
from starfish.deployment.firewall import ruleset
from starfish.deployment.spec import load as load_spec
from starfish.local import render_config

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
DEPLOY_DIR = REPO_ROOT / "deploy"
OPERATORS = ("dealer", "party0", "party1")
"""Operators whose service this recipe starts, in start order (the parties need the dealer)."""
PARTIES = ("party0", "party1")
CONFIG_ROOT, DATA_ROOT, CODE_ROOT = "/etc/starfish", "/var/lib/starfish", "/opt/starfish"


def hosts(deploy_dir: Path = DEPLOY_DIR) -> dict[str, str]:
    """Host name -> address of the recipe's example network (`deploy/hosts.toml`)."""
    with open(deploy_dir / "hosts.toml", "rb") as fh:
        return dict(tomllib.load(fh)["hosts"])


def unit_exec_start(unit: Path) -> list[str]:
    """The `ExecStart=` command of a systemd unit file, split like a shell would."""
    for line in unit.read_text().splitlines():
        if line.startswith("ExecStart="):
            return shlex.split(line.removeprefix("ExecStart="))
    raise ValueError(f"{unit} has no ExecStart= line")


def unit_environment(unit: Path) -> dict[str, str]:
    """The `Environment=` assignments of a systemd unit file."""
    env: dict[str, str] = {}
    for line in unit.read_text().splitlines():
        if line.startswith("Environment="):
            for item in shlex.split(line.removeprefix("Environment=")):
                key, _, value = item.partition("=")
                env[key] = value
    return env


@dataclass
class Recipe:
    """A rendered deployment: configs, certificates, tokens and data directories under `root`."""

    root: Path
    deploy_dir: Path = DEPLOY_DIR
    creds: dict[str, Any] = field(default_factory=dict)

    @property
    def etc(self) -> Path:
        return self.root / "etc"

    @property
    def var(self) -> Path:
        return self.root / "var"

    @property
    def ca_cert(self) -> Path:
        return self.etc / "certs" / "ca.pem"

    def map_path(self, text: str) -> str:
        """A production path of the recipe, mapped into this deployment."""
        return (
            text.replace(CONFIG_ROOT, str(self.etc))
            .replace(DATA_ROOT, str(self.var))
            .replace(CODE_ROOT, str(REPO_ROOT))
        )

    def config_path(self, name: str) -> Path:
        return self.etc / f"{name}.toml"

    def config(self, name: str) -> dict[str, Any]:
        with open(self.config_path(name), "rb") as fh:
            return tomllib.load(fh)

    def data_dir(self, name: str) -> Path:
        return Path(self.config(name)["data_dir"])

    def address(self, name: str) -> str:
        """The address an operator's service listens on (its `listen` key: a party's client
        API, the dealer service)."""
        return str(self.config(name)["listen"])

    def command(self, name: str) -> list[str]:
        """The operator's systemd `ExecStart=` line, paths mapped into this deployment."""
        unit = self.deploy_dir / "systemd" / f"starfish-{name}.service"
        return [self.map_path(a) for a in unit_exec_start(unit)]

    def environment(self, name: str) -> dict[str, str]:
        unit = self.deploy_dir / "systemd" / f"starfish-{name}.service"
        return {k: self.map_path(v) for k, v in unit_environment(unit).items()}

    def firewall(self, name: str) -> Path:
        """The operator's nftables file, rendered from `deploy/deployment.toml` (as
        `starfish deploy render` does on the operator's host)."""
        path = self.root / f"{name}.nft"
        path.write_text(ruleset(load_spec(self.deploy_dir / "deployment.toml"), name))
        return path


def render(
    root: Path,
    clients: list[str],
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
    deploy_dir: Path = DEPLOY_DIR,
) -> Recipe:
    """Create the deployment under `root` (see module doc); `overrides` replace keys of the
    parties' config tables (e.g. {"jobs": {"task_timeout_s": 5}})."""
    recipe = Recipe(Path(root).resolve(), deploy_dir)
    (recipe.etc / "certs").mkdir(parents=True, exist_ok=True)
    recipe.var.mkdir(parents=True, exist_ok=True)
    plan = hosts(deploy_dir)
    make_certs(recipe.etc / "certs", ips=("127.0.0.1", *plan.values()), hosts=("localhost",))
    recipe.creds = {
        "admin_token": secrets.token_urlsafe(32),
        "clients": {c: secrets.token_urlsafe(32) for c in clients},
        "principals": {c: c for c in clients},  # each client enrolled as its own organisation
    }
    fd = os.open(recipe.root / "credentials.json", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(recipe.creds, fh)
    for name in OPERATORS:
        text = (deploy_dir / name / f"{name}.toml").read_text()
        config = tomllib.loads(recipe.map_path(text))
        if name not in PARTIES:
            recipe.config_path(name).write_text(render_config(config))
            continue
        for table, values in (overrides or {}).items():
            config.setdefault(table, {}).update(values)
        config["auth"] = {
            "admin_token_sha256": token_digest(recipe.creds["admin_token"]),
            "clients": {c: token_digest(t) for c, t in recipe.creds["clients"].items()},
            "principals": dict(recipe.creds["principals"]),
        }
        recipe.config_path(name).write_text(render_config(config))
    return recipe
