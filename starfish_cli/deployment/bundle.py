"""Render one operator's bundle from the deployment description, on that operator's host.

`render_bundle(spec, role, out)` writes under `out`:

* `ROLE.toml` (installed as /etc/starfish/ROLE.toml): the recipe's config
  (`deploy/ROLE/ROLE.toml`) with every address and port taken from the description;
* `ROLE.nft` (/etc/starfish/ROLE.nft): the host's firewall (`starfish_cli.deployment.firewall`);
* `starfish-ROLE.service` (/etc/systemd/system/): the recipe's unit, unchanged;
* `certs/ROLE.key` + `certs/ROLE.csr` (parties: also `ROLE-signing.*`): the keys go to
  /etc/starfish/certs/ (0600, owned by the service user; `deploy/install.sh`); only the
  `.csr` files are sent to the CA.

The keys are generated here and never leave this host. With `request=False` (a renewal
of config only) no key is made.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from harness.local import render_config
from mpc.plane.cert_requests import make_request
from starfish_cli.deployment.firewall import ruleset
from starfish_cli.deployment.spec import Spec

DEPLOY_DIR = Path(__file__).resolve().parent.parent.parent / "deploy"


def _party_addresses(spec: Spec, role: str) -> dict[str, Any]:
    me, other = spec.operator(role), spec.operator("party1" if role == "party0" else "party0")
    top = {
        "listen": me.at(me.client_port),
        "peer_listen": me.at(me.peer_port),
        "peer_address": other.at(other.peer_port),
    }
    jobs: dict[str, Any] = {"dealer": spec.dealer.at(spec.dealer.port)}
    if role == "party0":
        jobs |= {"mpc_host": me.address, "mpc_port": me.mpc_port}
        top["admin_listen"] = me.at(me.admin_port)
    return {"top": top, "jobs": jobs, "observability": {"metrics_listen": f"127.0.0.1:{me.metrics_port}"}}


def config(spec: Spec, role: str, deploy_dir: Path = DEPLOY_DIR) -> dict[str, Any]:
    """`role`'s configuration: the recipe's file with the description's addresses."""
    with open(deploy_dir / role / f"{role}.toml", "rb") as fh:
        data = tomllib.load(fh)
    if role == "dealer":
        data["listen"] = spec.dealer.at(spec.dealer.port)
        data.setdefault("observability", {}).update(
            metrics_listen=f"127.0.0.1:{spec.dealer.metrics_port}", health_listen=f"127.0.0.1:{spec.dealer.health_port}"
        )
        return data
    values = _party_addresses(spec, role)
    data.update(values.pop("top"))
    for table, keys in values.items():
        data.setdefault(table, {}).update(keys)
    return data


def render_bundle(spec: Spec, role: str, out: Path, deploy_dir: Path = DEPLOY_DIR, request: bool = True) -> list[Path]:
    """Write `role`'s bundle to `out` (see module doc); returns the files written."""
    op = spec.operator(role)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    files = [out / f"{role}.toml", out / f"{role}.nft", out / f"starfish-{role}.service"]
    files[0].write_text(render_config(config(spec, role, deploy_dir)))
    files[1].write_text(ruleset(spec, role))
    files[2].write_text((deploy_dir / "systemd" / f"starfish-{role}.service").read_text())
    if request:
        certs = out / "certs"
        certs.mkdir(mode=0o700, exist_ok=True)
        files += make_request(certs, role, (op.address,), ("localhost",), signing=role != "dealer")
    return files
