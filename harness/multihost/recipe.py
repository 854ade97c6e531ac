"""Provision `deploy/` on emulated hosts the way docs/DEPLOY.md tells three operators to.

Each operator host gets a directory of its own, `root/hosts/<name>/`, standing for that
host's `/` (`STARFISH_ROOT` of `deploy/install.sh`). `render(root, clients)` runs the
documented steps as commands, in order (`provision_steps`, logged to
`root/provision.log`):

1. on each host: `starfish deploy render --role NAME --out BUNDLE` — this host's config,
   unit, firewall, its own private keys and the certificate requests (only those leave);
2. on the CA holder's machine (`root/ca/`): `starfish certs ca` once, then `starfish
   certs sign` for each request; the certificates and `ca.pem` go back to the host's bundle;
3. on each host: `deploy/install.sh NAME BUNDLE` as root: service user, keys 0600 and
   directories 0700 owned by that user, config, firewall and unit;
4. the admin's and clients' token digests into `[auth]` of both parties (the hand-set
   step), with the test's `overrides` of the parties' tables.

The bundle's config names production paths; they are mapped into the host's directory
before installing (`map_path`: `/etc/starfish` and `/var/lib/starfish` under the host's
root, `/opt/starfish` to `root/opt`, whose `.venv/bin/starfish` is a console script of
this repository). `Recipe.command(name)` is the `ExecStart=` line of the unit installed on
that host, mapped the same way, and `Recipe.user` the service user it runs as
(`harness.multihost.hosts`), so the tests and the benchmark run what the units run.
`private_keys(root)` lists where every private key is, to check that no host (and not the
CA holder) holds another operator's key.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shlex
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.local import render_config
from server.config import token_digest

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
DEPLOY_DIR = REPO_ROOT / "deploy"
OPERATORS = ("dealer", "party0", "party1")
"""Operators whose service this recipe starts, in start order (the parties need the dealer)."""
PARTIES = ("party0", "party1")
CONFIG_ROOT, DATA_ROOT, CODE_ROOT = "/etc/starfish", "/var/lib/starfish", "/opt/starfish"
STARFISH = [sys.executable, "-m", "starfish_cli"]
"""The `starfish` command of the operator's and the CA holder's steps."""


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


def console_script(path: Path) -> Path:
    """A `starfish` console script as the installer writes it for `[project.scripts]`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!{sys.executable}\nimport sys\nfrom starfish_cli.entry import main\n\nsys.exit(main())\n")
    path.chmod(0o755)
    return path


@dataclass
class Recipe:
    """A provisioned deployment: one directory per operator host under `root/hosts/`."""

    root: Path
    deploy_dir: Path = DEPLOY_DIR
    creds: dict[str, Any] = field(default_factory=dict)
    user: str = "root"  #: the service user of every unit (install.sh's SERVICE_USER)

    def host(self, name: str) -> Path:
        """The directory standing for host `name`'s `/`."""
        return self.root / "hosts" / name

    def etc(self, name: str) -> Path:
        return self.host(name) / CONFIG_ROOT.lstrip("/")

    def bundle(self, name: str) -> Path:
        """Where the operator of `name` renders its bundle (root's home on that host)."""
        return self.host(name) / "root" / f"{name}-bundle"

    @property
    def ca_cert(self) -> Path:
        """The clients' copy of the CA certificate (sent to them by the operators)."""
        return self.root / "clients" / "ca.pem"

    def map_path(self, text: str, name: str) -> str:
        """Production paths of the recipe, mapped into host `name`'s directory."""
        return (
            text.replace(CONFIG_ROOT, str(self.etc(name)))
            .replace(DATA_ROOT, str(self.host(name) / DATA_ROOT.lstrip("/")))
            .replace(CODE_ROOT, str(self.root / "opt"))
        )

    def config_path(self, name: str) -> Path:
        return self.etc(name) / f"{name}.toml"

    def config(self, name: str) -> dict[str, Any]:
        with open(self.config_path(name), "rb") as fh:
            return tomllib.load(fh)

    def data_dir(self, name: str) -> Path:
        return Path(self.config(name)["data_dir"])

    def address(self, name: str) -> str:
        """The address an operator's service listens on (its `listen` key: a party's client
        API, the dealer service)."""
        return str(self.config(name)["listen"])

    def unit(self, name: str) -> Path:
        return self.host(name) / "etc" / "systemd" / "system" / f"starfish-{name}.service"

    def command(self, name: str) -> list[str]:
        """The installed unit's `ExecStart=` line, paths mapped into the host's directory."""
        return [self.map_path(a, name) for a in unit_exec_start(self.unit(name))]

    def environment(self, name: str) -> dict[str, str]:
        return {k: self.map_path(v, name) for k, v in unit_environment(self.unit(name)).items()}

    def firewall(self, name: str) -> Path:
        """The operator's installed nftables file (rendered from `deploy/deployment.toml`)."""
        return self.etc(name) / f"{name}.nft"


def provision_steps(recipe: Recipe, name: str) -> list[tuple[str, list[str]]]:
    """(where, argv) of the steps that bring host `name` from nothing to installed, after
    the CA exists: render, sign every request (CA holder), install."""
    bundle, spec = recipe.bundle(name), recipe.deploy_dir / "deployment.toml"
    steps = [(name, [*STARFISH, "deploy", "render", "--spec", str(spec), "--role", name, "--out", str(bundle)])]
    for csr in sorted(c.name for c in _requests(name)):
        steps.append(("ca", [*STARFISH, "certs", "sign", "--ca", str(recipe.root / "ca"), "--request", csr]))
    steps.append((name, ["bash", str(recipe.deploy_dir / "install.sh"), name, str(bundle)]))
    return steps


def _requests(name: str) -> list[Path]:
    """The certificate requests `starfish deploy render` writes for `name`."""
    return [Path(f"{name}.csr")] + ([Path(f"{name}-signing.csr")] if name in PARTIES else [])


def _run(recipe: Recipe, where: str, argv: list[str]) -> None:
    """One provisioning step, logged; the CA holder works in its own directory."""
    cwd = recipe.root / "ca" if where == "ca" else recipe.host(where)
    env = {**os.environ, "STARFISH_ROOT": str(recipe.host(where)), "SERVICE_USER": recipe.user}
    with open(recipe.root / "provision.log", "a") as log:
        log.write(f"[{where}] $ {shlex.join(argv)}\n")
        log.flush()
        subprocess.run(argv, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, check=True, timeout=300)


def _provision_host(recipe: Recipe, name: str) -> None:
    """Render on the host, carry the requests to the CA and the answers back, install."""
    render_step, *sign_steps, install_step = provision_steps(recipe, name)
    _run(recipe, *render_step)
    certs, inbox = recipe.bundle(name) / "certs", recipe.root / "ca"
    config = certs.parent / f"{name}.toml"
    config.write_text(recipe.map_path(config.read_text(), name))  # the host's `/` is its directory
    for csr in _requests(name):
        shutil.copy(certs / csr, inbox / csr)  # only the request travels
    for step in sign_steps:
        _run(recipe, *step)
    for csr in _requests(name):
        shutil.copy((inbox / csr).with_suffix(".pem"), certs / csr.with_suffix(".pem").name)
    shutil.copy(inbox / "ca.pem", certs / "ca.pem")
    _run(recipe, *install_step)


def _set_auth(recipe: Recipe, name: str, overrides: Mapping[str, Mapping[str, Any]] | None) -> None:
    """The hand-set step: token digests into `[auth]`, plus the caller's table overrides."""
    path = recipe.config_path(name)
    config = tomllib.loads(path.read_text())
    for table, values in (overrides or {}).items():
        config.setdefault(table, {}).update(values)
    config["auth"] = {
        "admin_token_sha256": token_digest(recipe.creds["admin_token"]),
        "clients": {c: token_digest(t) for c, t in recipe.creds["clients"].items()},
        "principals": dict(recipe.creds["principals"]),
    }
    path.write_text(render_config(config))  # same file: its owner and mode (0640) stay


def render(
    root: Path,
    clients: list[str],
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
    deploy_dir: Path = DEPLOY_DIR,
    user: str = "root",
) -> Recipe:
    """Provision the deployment under `root` (see module doc); `overrides` replace keys of the
    parties' config tables (e.g. {"jobs": {"task_timeout_s": 5}}); `user` is the service user."""
    recipe = Recipe(Path(root).resolve(), deploy_dir, user=user)
    (recipe.root / "ca").mkdir(parents=True, exist_ok=True)
    console_script(recipe.root / "opt" / ".venv" / "bin" / "starfish")
    _run(recipe, "ca", [*STARFISH, "certs", "ca", "--dir", str(recipe.root / "ca")])
    for name in OPERATORS:
        recipe.host(name).mkdir(parents=True, exist_ok=True)
        _provision_host(recipe, name)
    recipe.ca_cert.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(recipe.root / "ca" / "ca.pem", recipe.ca_cert)
    recipe.creds = {
        "admin_token": secrets.token_urlsafe(32),
        "clients": {c: secrets.token_urlsafe(32) for c in clients},
        "principals": {c: c for c in clients},  # each client enrolled as its own organisation
    }
    fd = os.open(recipe.root / "credentials.json", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(recipe.creds, fh)
    for name in PARTIES:
        _set_auth(recipe, name, overrides)
    return recipe


def private_keys(root: Path) -> dict[str, dict[str, str]]:
    """Place (a host's name, or "ca") -> {key file path relative to it: sha256 of its bytes}."""
    places = {p.name: p for p in (Path(root) / "hosts").iterdir()} | {"ca": Path(root) / "ca"}
    found: dict[str, dict[str, str]] = {}
    for place, top in places.items():
        keys = (k for k in top.rglob("*.key") if k.is_file())
        found[place] = {str(k.relative_to(top)): hashlib.sha256(k.read_bytes()).hexdigest() for k in keys}
    return found
