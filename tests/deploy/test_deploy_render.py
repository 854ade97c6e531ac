"""`starfish deploy render`: one description, each operator's bundle; an address is written once."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib

import pytest

from mpc.plane.certificate_authority import make_ca, sign_request
from starfish_cli.deployment import spec as spec_mod
from starfish_cli.deployment.bundle import DEPLOY_DIR, config
from starfish_cli.entry import main

EXAMPLE = DEPLOY_DIR / "deployment.toml"
ADDRESS_KEYS = ("listen", "peer_listen", "peer_address")


def _spec_data() -> dict:
    return tomllib.loads(EXAMPLE.read_text())


def test_the_example_description_renders_the_recipes_configs():
    spec = spec_mod.load(EXAMPLE)
    for role in ("party0", "party1", "dealer"):
        recipe = tomllib.loads((DEPLOY_DIR / role / f"{role}.toml").read_text())
        assert config(spec, role) == recipe, f"deploy/{role}/{role}.toml and deploy/deployment.toml disagree"


def test_an_address_changed_in_the_description_changes_every_file_that_names_it(tmp_path):
    data = _spec_data()
    data["party1"]["address"] = "192.0.2.7"
    data["party1"]["peer_port"] = 40001
    data["admin"] = {"ports": [22, 2222], "sources": ["198.51.100.9"]}
    text = "\n".join(
        f"[{t}]\n" + "\n".join(f"{k} = {v!r}".replace("'", '"') for k, v in keys.items()) for t, keys in data.items()
    )
    spec_file = tmp_path / "deployment.toml"
    spec_file.write_text(text)
    bundles = {}
    for role in ("party0", "party1", "dealer"):
        out = tmp_path / role
        assert main(["deploy", "render", "--spec", str(spec_file), "--role", role, "--out", str(out)]) == 0
        bundles[role] = {p.name: p.read_text() for p in out.iterdir() if p.is_file()}
    assert tomllib.loads(bundles["party0"]["party0.toml"])["peer_address"] == "192.0.2.7:40001"
    assert tomllib.loads(bundles["party1"]["party1.toml"])["peer_listen"] == "192.0.2.7:40001"
    assert "ip saddr 192.0.2.7 tcp dport { 50061, 50070 } accept" in bundles["party0"]["party0.nft"]
    assert "ip saddr { 10.20.0.10, 192.0.2.7 } tcp dport 50080 accept" in bundles["dealer"]["dealer.nft"]
    for role, files in bundles.items():
        assert "10.20.0.11" not in "".join(files.values()), f"{role}'s bundle still names the old address"
        nft = files[f"{role}.nft"]
        assert len(re.findall(r"^table inet starfish \{", nft, re.M)) == 1  # one table: admin + services
        ports = "22, 2222, 50055" if role == "party0" else "22, 2222"  # party0's admin API: an [admin] port
        assert f'ip saddr 198.51.100.9 tcp dport {{ {ports} }} accept comment "operator administration"' in nft
    assert tomllib.loads(bundles["party0"]["party0.toml"])["admin_listen"] == "10.20.0.10:50055"
    assert "admin_listen" not in bundles["party1"]["party1.toml"]


def test_the_bundle_holds_only_this_operators_keys_and_requests_the_ca_accepts(tmp_path):
    out = tmp_path / "bundle"
    assert main(["deploy", "render", "--spec", str(EXAMPLE), "--role", "party1", "--out", str(out)]) == 0
    certs = out / "certs"
    assert sorted(p.name for p in certs.iterdir()) == [
        "party1-signing.csr",
        "party1-signing.key",
        "party1.csr",
        "party1.key",
    ]
    assert all((certs / k).stat().st_mode & 0o077 == 0 for k in ("party1.key", "party1-signing.key"))
    make_ca(tmp_path / "ca")
    for csr in certs.glob("*.csr"):
        assert b"CERTIFICATE" in sign_request(tmp_path / "ca", csr.read_bytes())


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        (lambda d: d["party0"].pop("peer_port"), r"missing key\(s\) \['peer_port'\]"),
        (lambda d: d["dealer"].update(prt=1), r"unknown key\(s\) \['prt'\]"),
        (lambda d: d["admin"].update(ports=[]), "lock the operators out"),
        (lambda d: d["party1"].update(address="party1.example"), "must be an IP address"),
        (lambda d: d["party1"].update(client_port=22), "an \\[admin\\] port"),
        (lambda d: d["party0"].update(mpc_port=50061), r"\[party0\] peer_port"),
        (lambda d: d["party0"].update(client_port=70000), "port number"),
    ],
)
def test_an_invalid_description_is_refused_naming_the_key(edit, reason):
    data = _spec_data()
    edit(data)
    with pytest.raises(spec_mod.SpecError, match=reason):
        spec_mod.parse(data)


@pytest.mark.skipif(shutil.which("nft") is None, reason="nft (nftables) is not installed")
def test_the_rendered_rulesets_are_valid_nftables(tmp_path):
    for role in ("party0", "party1", "dealer"):
        out = tmp_path / role
        main(["deploy", "render", "--spec", str(EXAMPLE), "--role", role, "--out", str(out), "--no-request"])
        check = subprocess.run(["nft", "-c", "-f", str(out / f"{role}.nft")], capture_output=True, text=True)
        if check.returncode and "Operation not permitted" in check.stderr:
            pytest.skip("nft -c needs CAP_NET_ADMIN here")
        assert check.returncode == 0, check.stderr


def test_the_example_description_and_the_emulated_network_name_the_same_hosts():
    from harness.multihost.recipe import hosts

    spec = spec_mod.load(EXAMPLE)
    assert {r: spec.operator(r).address for r in ("party0", "party1", "dealer")} == {
        r: a for r, a in hosts().items() if r != "clients"
    }
