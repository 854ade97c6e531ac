"""Stage I and an unlearning job across network namespaces, run from the `deploy/` recipe.

Hosts (deploy/hosts.toml, one namespace each): party0, party1, the clients (and the admin
tool), plus a stranger. Each operator host is provisioned as docs/DEPLOY.md says (its own
keys and certificate requests, the CA signing requests only, `deploy/install.sh`), checked
with `starfish preflight`, and runs its unit's `ExecStart=` as the service user. Every TCP
flow entering the bridge is captured and reassembled.
Checked: no host (nor the CA holder) holds another operator's private key; preflight passes
before the start and with every service up; the services run as the service user; the
administrative port answers the operators' workstation and not the stranger; the job
succeeds and agrees with the same job on a single host; every flow between
operators is TLS 1.3 with only the hellos in the clear, and no share, model or fixed-point
model bytes appear in any flow; mid-job, every operator listens only on the addresses its
config names; the stranger completes no connection to an operator's
non-client ports (the recipe's firewall drops it, and without the firewall the TLS
handshake refuses it); the link between party0 and party1 taken down mid-job makes the job resume in a new
session.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from client_sdk.evidence import check_certificate, model_matches
from harness.netlab.capture import tcpdump_missing
from harness.netlab.flows import find, read_streams
from harness.netlab.tls_records import only_hellos_in_clear, parse_records, server_hello_version

from helpers.multihost_world import JOB_TIMEOUT_S, SERVICE_USER, SESSION_TIMEOUT_S, STRANGER, World

pytestmark = [
    pytest.mark.needs_netns,
    pytest.mark.skipif(tcpdump_missing() is not None, reason=str(tcpdump_missing())),
    pytest.mark.skipif(shutil.which("nft") is None, reason="nftables is not installed (deploy/setup.sh installs it)"),
]
PEERS = str(Path(__file__).with_name("wire_peers.py"))
OPERATOR_HOSTS = ("party0", "party1", "dealer")
FIXED_POINT_SCALE = 2.0**16
MODEL_TOLERANCE = 1e-3  #: relative L2 gap between two 2PC runs of the same job


@contextlib.contextmanager
def traversable(path: Path):
    """Let other users pass through `path` and its parents (o+x, no listing) while the block
    runs: the service user runs the checkout's code and virtual environment, and a fresh clone
    may sit in a directory closed to others (mktemp's 0700). Modes are restored after."""
    closed = [p for p in (path, *path.parents) if not p.stat().st_mode & 0o001]
    for p in closed:
        p.chmod(p.stat().st_mode | 0o001)
    try:
        yield
    finally:
        for p in closed:
            p.chmod(p.stat().st_mode & ~0o001)


@pytest.fixture(scope="module")
def world(request):
    # the service user must reach its files: a directory of its own in /tmp (pytest's own
    # temporary directories are closed to other users); kept when a test failed
    root = Path(tempfile.mkdtemp(prefix="starfish-multihost-"))
    root.chmod(0o755)
    with traversable(Path(__file__).resolve().parents[2]):
        yield World.create(root)
    if request.session.testsfailed == 0:
        shutil.rmtree(root, ignore_errors=True)


def test_each_operator_host_holds_only_its_own_private_keys(world):
    keys = world.provisioning["keys"]
    certs = "etc/starfish/certs"
    assert {place: sorted(found) for place, found in keys.items()} == {
        "party0": [f"{certs}/party0-signing.key", f"{certs}/party0.key"],
        "party1": [f"{certs}/party1-signing.key", f"{certs}/party1.key"],
        "dealer": [f"{certs}/dealer.key"],
        "ca": ["ca.key"],  # the CA holder signed requests and never saw an operator's key
    }
    digests = [d for found in keys.values() for d in found.values()]
    assert len(set(digests)) == len(digests)  # no key copied from one place to another
    from harness.multihost.recipe import private_keys

    assert private_keys(world.recipe.root) == keys  # still so after Stage I


def test_preflight_passes_on_every_host_before_and_with_the_services_up(world):
    for stage in ("preflight", "running"):
        for host, (code, table) in world.provisioning[stage].items():
            assert code == 0 and "\n0 failed, " in table, f"{stage} {host}:\n{table}"
    assert "reach peer" in world.provisioning["running"]["party0"][1]
    assert "reach dealer" in world.provisioning["running"]["party1"][1]


def test_services_run_as_the_service_user(world):
    import pwd

    uid = pwd.getpwnam(SERVICE_USER).pw_uid
    assert world.provisioning["uids"] == {"dealer": uid, "party0": uid, "party1": uid}


def test_the_admin_port_answers_the_operators_workstation_only(world):
    probes = world.provisioning["admin"]
    admin = {f"{world.addresses[h]}:22" for h in OPERATOR_HOSTS} | {world.recipe.config("party0")["admin_listen"]}
    assert probes["workstation"] == dict.fromkeys(admin, "connected")
    assert {t: probes["stranger"][t] for t in admin} == dict.fromkeys(admin, "timeout")
    clients_api = {world.recipe.address(p) for p in ("party0", "party1")}
    assert {t: probes["stranger"][t] for t in clients_api} == dict.fromkeys(clients_api, "connected")


def _listeners(lab, host: str) -> list[str]:
    """ "ip:port" of every TCP listener in a host (IPv4-mapped IPv6 written as IPv4), loopback excluded."""
    out = lab.run(host, ["ss", "-Hltn"]).stdout
    found = set()
    for line in out.splitlines():
        ip, _, port = line.split()[3].rpartition(":")
        ip = ip.strip("[]").removeprefix("::ffff:")
        if not ip.startswith("127.") and ip != "::1":
            found.add(f"{ip}:{port}")
    return sorted(found)


def _probe_from_stranger(lab, fleet, world: World) -> dict:
    """While the session runs: the stranger tries every operator port but the client APIs,
    through the firewall (TCP) and, host by host with the firewall lifted, with TLS — all but
    party0's admin API, whose second layer is the admin token (server-side TLS, like a client
    port; tests/server/test_server_services.py), not a client certificate."""
    fleet.wait_for("step threshold", timeout_s=120)
    client_apis = {world.recipe.address(n) for n in ("party0", "party1")}
    every = {h: _listeners(lab, h) for h in OPERATOR_HOSTS}
    listening = {h: [a for a in addresses if a not in client_apis] for h, addresses in every.items()}
    jobs0 = world.recipe.config("party0")["jobs"]
    mpc = f"{jobs0['mpc_host']}:{jobs0['mpc_port']}"  # party0's MPC listener, whether listening right now or not
    targets = sorted({mpc, *(a for addresses in listening.values() for a in addresses)})
    tcp = json.loads(lab.run(STRANGER[0], [sys.executable, PEERS, "try-connect", *targets], timeout=60).stdout)
    tls = {}
    for host, addresses in listening.items():
        lab.run(host, ["nft", "delete", "table", "inet", "starfish"])
        try:
            for a in (a for a in addresses if a != world.recipe.config("party0")["admin_listen"]):
                ip, port = a.rsplit(":", 1)
                argv = [sys.executable, PEERS, "tls-no-cert", ip, port, str(world.recipe.ca_cert)]
                tls[a] = lab.run(STRANGER[0], argv).stdout.strip()
        finally:
            lab.run(host, ["nft", "-f", str(world.recipe.firewall(host))])
    return {"tcp": tcp, "targets": targets, "tls": tls, "listening": listening, "every": every, "mpc": mpc}


@pytest.fixture(scope="module")
def jobs(world):
    multi = world.run_job("multi", capture=True, hook=lambda lab, fleet: _probe_from_stranger(lab, fleet, world))
    single = world.run_job("single", single_host=True)
    return {"multi": multi, "single": single}


def _needles(world: World, model: np.ndarray) -> dict[str, bytes]:
    """Byte strings that must never cross the wire in the clear: share and model bytes."""
    saved = world.saved / "party0"
    share = max((saved / "shares").glob("r*/*.i64")).read_bytes()
    last_model = max((saved / "models").glob("*.f32"), key=lambda p: p.stat().st_mtime).read_bytes()
    fixed = np.round(model.astype(np.float64) * FIXED_POINT_SCALE).astype("<i8").tobytes()
    out = {}
    for name, data in (("client share", share), ("model M_T", last_model), ("model M̂ float32", model.tobytes())):
        out.update({f"{name} @{i}": data[i : i + 32] for i in (0, len(data) // 2, len(data) - 32)})
    out.update({f"model M̂ fixed-point @{i}": fixed[i : i + 32] for i in range(0, len(fixed) - 32, len(fixed) // 8)})
    return out


def _tls_problems(streams, addresses: dict[str, str], pairs: set[frozenset[str]]) -> list[str]:
    """Streams between the given host pairs that are not TLS 1.3-shaped (or not whole)."""
    names = {a: n for n, a in addresses.items()}
    problems = []
    for s in streams.values():
        ends = frozenset((names.get(s.src, s.src), names.get(s.dst, s.dst)))
        if ends not in pairs or not s.nbytes:
            continue
        if s.gaps:
            problems.append(f"{s.key}: the capture missed part of the stream")
            continue
        verdict = parse_records(s.payload)
        if not verdict.well_formed:
            problems.append(f"{s.key}: not TLS ({verdict.error}), {s.nbytes} bytes")
        elif not only_hellos_in_clear(verdict):
            problems.append(f"{s.key}: plaintext records after the handshake")
    return problems


def test_stage1_across_hosts_is_tls_everywhere(world):
    streams = read_streams(world.stage1_capture, world.stage1_ports)
    addresses = world.addresses
    client_party = {frozenset(("clients", p)) for p in ("party0", "party1")}
    operators = {frozenset(("party0", "party1"))}
    flows = {frozenset((s.src, s.dst)) for s in streams.values()}
    assert {
        frozenset((addresses["clients"], addresses["party0"])),
        frozenset((addresses["party0"], addresses["party1"])),
    } <= flows
    assert _tls_problems(streams, addresses, client_party | operators) == []
    servers = [s for s in streams.values() if s.nbytes and s.sport in (50051, 50052, 50061, 50062)]
    assert servers and all(server_hello_version(s.payload) == 0x0304 for s in servers)
    stored = min((world.saved / "party0" / "shares").glob("r*/*.i64")).read_bytes()
    assert find(streams, {"client share": stored[:32]}) == []


def test_job_across_hosts_agrees_with_the_single_host_run(world, jobs):
    multi, single = jobs["multi"], jobs["single"]
    assert multi.outcome["ok"], multi.log[-3000:]
    assert single.outcome["ok"], single.log[-3000:]
    assert multi.report["selection"]["selected_rounds"] == single.report["selection"]["selected_rounds"]
    assert multi.report["flags"] == single.report["flags"]
    assert multi.report["certificate"]["status"] == "signed", multi.report["certificate"]  # both operators signed
    # and the certificate verifies offline against the CA alone, naming this job and its model
    check = check_certificate(world.root / "multi" / "certificate.json", [world.recipe.ca_cert])
    assert check.valid, check.problems
    assert check.statement["job"]["id"] == multi.outcome["job_id"]
    assert model_matches(check.statement, multi.model)
    gap = float(np.linalg.norm(multi.model - single.model) / np.linalg.norm(single.model))
    assert gap <= MODEL_TOLERANCE, gap


def test_every_flow_between_operators_is_encrypted(world, jobs):
    multi = jobs["multi"]
    streams = read_streams(multi.capture, multi.capture_ports)
    operators = {frozenset((a, b)) for a in OPERATOR_HOSTS for b in OPERATOR_HOSTS if a != b}
    assert any(
        frozenset((world.addresses["party0"], world.addresses["party1"])) == frozenset((s.src, s.dst))
        for s in streams.values()
    )
    assert _tls_problems(streams, world.addresses, operators) == []
    hits = find(streams, _needles(world, multi.model))
    assert sorted({(name, s.src, s.dst, s.dport) for name, s in hits}) == []


def test_a_stranger_completes_no_connection_to_operator_ports(world, jobs):
    probe = jobs["multi"].hook
    listening = probe["listening"]
    assert world.recipe.config("party0")["peer_listen"] in listening["party0"]
    assert world.recipe.config("party0")["admin_listen"] in listening["party0"]  # the admin API: not the stranger's
    assert world.recipe.address("dealer") in listening["dealer"]
    assert probe["mpc"] in probe["tcp"]
    assert {t: r for t, r in probe["tcp"].items() if r != "timeout"} == {}  # the firewall drops the SYN
    assert {t: r for t, r in probe["tls"].items() if not r.startswith("refused")} == {}  # TLS refuses the stranger
    assert world.recipe.config("party0")["admin_listen"] in probe["targets"]  # dropped by the firewall


def _configured_listeners(world: World) -> dict[str, set[str]]:
    """host -> the addresses its config tells its processes to bind (no wildcard among them)."""
    party0, party1 = world.recipe.config("party0"), world.recipe.config("party1")
    mpc = f"{party0['jobs']['mpc_host']}:{party0['jobs']['mpc_port']}"
    return {
        "party0": {party0["listen"], party0["admin_listen"], party0["peer_listen"], mpc},
        "party1": {party1["listen"], party1["peer_listen"]},
        "dealer": {world.recipe.address("dealer")},
    }


def test_operators_listen_only_on_their_configured_addresses(world, jobs):
    every = jobs["multi"].hook["every"]  # taken mid-job, loopback excluded
    configured = _configured_listeners(world)
    assert {h: set(every[h]) for h in ("party1", "dealer")} == {h: configured[h] for h in ("party1", "dealer")}
    party0 = world.recipe.config("party0")
    assert {party0["listen"], party0["admin_listen"], party0["peer_listen"]} <= set(every["party0"])
    assert {h: sorted(set(addresses) - configured[h]) for h, addresses in every.items()} == {h: [] for h in every}


def attempts_seen(lines: list[str]) -> int:
    """The highest session attempt the status stream has shown (1 before any is shown)."""
    return max((int(m.group(1)) for line in lines if (m := re.search(r"session attempt (\d+)", line))), default=1)


def test_a_link_taken_down_mid_job_is_retried_in_a_new_session(world, jobs):
    def cut(lab, fleet):
        # the link between the two operators goes down at the switch while both still reach the
        # clients and the dealer, once the first 2PC step shows in the status stream; it stays
        # down until the job reports its next session attempt: whichever two-party exchange
        # comes next (the pending one, or the first after the clients' answers) waits longer
        # than the session timeout, so the outage always spans one, however the job is timed
        # (on a loaded host an attempt may have failed before the cut: the next one is awaited)
        fleet.wait_for("step threshold", timeout_s=120)
        start = time.monotonic()
        lab.set_path("party0", "party1", up=False)
        try:
            fleet.wait_for(f"session attempt {attempts_seen(fleet.lines) + 1}", timeout_s=JOB_TIMEOUT_S)
        finally:
            lab.set_path("party0", "party1", up=True)
        return time.monotonic() - start

    run = world.run_job("link-down", hook=cut)
    assert run.outcome["ok"], run.log[-3000:]
    assert run.report["job"]["session_attempts"] >= 2
    assert run.report["corrections"]["missing"] == 0  # tasks outlive the outage: everyone answered
    assert run.report["selection"]["selected_rounds"] == jobs["single"].report["selection"]["selected_rounds"]
    reference = jobs["single"].model
    assert float(np.linalg.norm(run.model - reference) / np.linalg.norm(reference)) <= MODEL_TOLERANCE
    assert SESSION_TIMEOUT_S <= run.hook < SESSION_TIMEOUT_S + 60
    assert run.seconds < run.hook + 240
