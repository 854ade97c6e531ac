"""The deployment of `deploy/` on emulated hosts, trained once, for the namespace job tests.

`World.create` provisions the recipe as docs/DEPLOY.md tells the operators to
(`harness.multihost.recipe.render`: each host renders its bundle and makes its own keys,
the CA holder signs requests only, `deploy/install.sh` installs each bundle for the service
user), records where every private key is, builds the lab of `deploy/hosts.toml` plus a
stranger host, runs `starfish preflight` on each operator host before the start, loads the
installed firewall rules, starts the dealer, party0 and party1 from their installed units'
`ExecStart=` lines as the service user, runs `starfish preflight --no-bind` again with the
peers up, probes the administrative port from the operators' workstation (the clients'
host) and from the stranger, runs Stage I from the clients' host (captured on the bridge),
and saves the parties' data so that each job below starts from the same history:

* `run_job(name, lab_kind, ...)` restores the data, starts the services on a multi-host or
  a single-host lab, runs the admin's unlearn request and the clients' task answers from
  the clients' host, and returns the outcome; optional hooks run while the job is running
  (capture on the bridge, probes from the stranger, taking a link down).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from harness.multihost.clients_host import command as fleet_command
from harness.multihost.hosts import OperatorHosts
from harness.multihost.recipe import OPERATORS, STARFISH, Recipe, hosts, private_keys, render
from harness.netlab.capture import Capture
from harness.netlab.lab import Lab, LabError

STRANGER = ("stranger", "10.20.0.66")
SERVICE_USER = "nobody"
"""The units' service user in the test: an account every machine has (install.sh would
create `starfish`); it owns the keys and data, and runs the services."""
WIRE_PEERS = str(Path(__file__).resolve().parents[1] / "netns" / "wire_peers.py")
ADMIN_PORT = 22  #: `[admin] ports` of deploy/deployment.toml: an SSH stand-in listens there
CLIENTS = 6
ROUNDS = 6
JOB_TIMEOUT_S = 360.0
SESSION_TIMEOUT_S = 30.0
"""How long a worker waits for its peer or the dealer: under a full test run's load (3 test
workers on 2 cores) a party1 worker took over 12 s to start and join, and the dealer over 12 s
to answer, five attempts in a row."""
TASK_TIMEOUT_S = 90.0
"""Longer than the link outage of the test (the session timeout and the next attempt's start):
a resumed session re-posts its tasks and every client answers, so the resumed job must reach
the same model."""
OVERRIDES = {
    "rounds": {
        "deadline_s": 120.0,
        "min_clients": CLIENTS,
        "max_rounds": ROUNDS,
        "poll_s": 0.05,
        "peer_timeout_s": 8.0,
    },
    "jobs": {
        "task_timeout_s": TASK_TIMEOUT_S,
        "session_timeout_s": SESSION_TIMEOUT_S,
        "retry_backoff_s": 1.0,
        "poll_s": 0.1,
    },
}


def demo_config() -> Any:
    """A small federation: 8×8 digits, small MLP (2,410 parameters), one backdoored target."""
    from bench.whole_job_service import demo_config as bench_config

    return replace(
        bench_config(quick=True),
        num_clients=CLIENTS,
        rounds=ROUNDS,
        job_timeout_s=JOB_TIMEOUT_S,
        task_deadline_s=TASK_TIMEOUT_S,
        # runs are compared draw for draw with the single-host run: no anchored reveal's secret noise
        starfish={**bench_config(quick=True).starfish, "anchor_noise": False},
    )


@dataclass
class JobRun:
    """What one job run produced (outcome file, model, report, capture, hook results)."""

    outcome: dict[str, Any]
    model: np.ndarray | None
    report: dict[str, Any] | None
    log: str
    seconds: float
    capture: Path | None = None
    capture_ports: dict[int, str] = field(default_factory=dict)
    hook: Any = None


@dataclass
class World:
    root: Path
    recipe: Recipe
    config_path: Path
    stage1_capture: Path
    stage1_ports: dict[int, str]
    saved: Path
    addresses: dict[str, str]
    provisioning: dict[str, Any] = field(default_factory=dict)
    """What the installation showed: private keys per host after provisioning, preflight
    output per host (before the start and with every service up), each service's user id,
    the administrative-port probes."""

    @classmethod
    def create(cls, root: Path) -> World:
        cfg = demo_config()
        from evaluation.simulator import build_federation

        clients = [c.client_id for c in build_federation(cfg.simulation()).clients]
        recipe = render(root / "deployment", clients, OVERRIDES, user=SERVICE_USER)
        config_path = root / "demo.json"
        config_path.write_text(json.dumps(cfg.as_dict()))
        addresses = {**hosts(), STRANGER[0]: STRANGER[1]}
        world = cls(root, recipe, config_path, root / "stage1.pcap", {}, root / "saved", addresses)
        world.provisioning["keys"] = private_keys(recipe.root)
        with world.lab() as lab:
            world.provisioning["preflight"] = {h: world.preflight(lab, h, "--no-reach") for h in OPERATORS}
            # captured from the start: every connection's handshake is on the record
            with Capture(lab, world.stage1_capture) as cap:
                ops = world.start(lab)
                try:
                    world.provisioning["running"] = {h: world.preflight(lab, h, "--no-bind") for h in OPERATORS}
                    world.provisioning["uids"] = {h: _uid(p.pid) for h, p in ops.procs.items()}
                    world.provisioning["admin"] = world.probe_admin_ports(lab)
                    world.fleet(lab, "train", root / "stage1.json").check()
                finally:
                    ops.stop()
            world.stage1_ports = dict(cap.ifindexes)
        ops.save_data(world.saved)
        return world

    def preflight(self, lab: Lab, host: str, *flags: str) -> tuple[int, str]:
        """`starfish preflight` of `host`'s installed config, run on that host (exit, table)."""
        argv = [*STARFISH, "preflight", "--config", str(self.recipe.config_path(host)), "--user", SERVICE_USER]
        proc = subprocess.run(lab.command(host, [*argv, *flags]), capture_output=True, text=True, timeout=120)
        return proc.returncode, proc.stdout + proc.stderr

    def probe_admin_ports(self, lab: Lab) -> dict[str, dict[str, str]]:
        """With an SSH stand-in on each operator host's administrative port: connections from
        the stranger, then from the operators' workstation (the clients' host), to those and
        to party0's admin API; the stranger also tries the client ports."""
        targets = [f"{self.addresses[h]}:{ADMIN_PORT}" for h in OPERATORS]
        targets.append(str(self.recipe.config("party0")["admin_listen"]))  # party0's admin API
        stand_ins = [
            lab.popen(h, [sys.executable, WIRE_PEERS, "serve-plain", str(ADMIN_PORT)], stdout=subprocess.PIPE)
            for h in OPERATORS
        ]
        try:
            for proc in stand_ins:
                assert proc.stdout is not None and proc.stdout.readline().strip() == b"listening"
            clients_api = [self.recipe.address(p) for p in ("party0", "party1")]
            stranger = lab.run(STRANGER[0], [sys.executable, WIRE_PEERS, "try-connect", *targets, *clients_api])
            workstation = lab.run("clients", [sys.executable, WIRE_PEERS, "try-connect", *targets])
        finally:
            for proc in stand_ins:
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        return {"stranger": json.loads(stranger.stdout), "workstation": json.loads(workstation.stdout)}

    def lab(self, single_host: bool = False) -> Lab:
        return Lab(self.addresses, single_host=single_host)

    def start(self, lab: Lab) -> OperatorHosts:
        """Firewall rules (multi-host), then the dealer, party0 and party1 from their units."""
        ops = OperatorHosts(lab, self.recipe)
        ops.start()
        return ops

    def fleet(self, lab: Lab, mode: str, out: Path) -> FleetProcess:
        argv = fleet_command(self.recipe, self.config_path, mode, out)
        proc = lab.popen("clients", argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        return FleetProcess(proc, mode)

    def run_job(
        self,
        name: str,
        single_host: bool = False,
        capture: bool = False,
        hook: Callable[[Lab, FleetProcess], Any] | None = None,
    ) -> JobRun:
        out = self.root / name
        start = time.monotonic()
        with self.lab(single_host) as lab:
            ops = OperatorHosts(lab, self.recipe)
            ops.restore_data(self.saved)
            ops = self.start(lab)
            try:
                cap = Capture(lab, out.with_suffix(".pcap")).start() if capture else None
                fleet = self.fleet(lab, "unlearn", out)
                hook_result = hook(lab, fleet) if hook is not None else None
                fleet.wait(JOB_TIMEOUT_S + 60)
                if cap is not None:
                    cap.stop()
            finally:
                ops.stop()
        outcome = json.loads((out / "outcome.json").read_text())
        model = np.load(out / "model.npy", allow_pickle=False) if outcome.get("ok") else None
        report = json.loads((out / "report.json").read_text()) if outcome.get("ok") else None
        return JobRun(
            outcome,
            model,
            report,
            fleet.output,
            time.monotonic() - start,
            out.with_suffix(".pcap") if capture else None,
            dict(cap.ifindexes) if cap is not None else {},
            hook_result,
        )


def _uid(pid: int) -> int:
    """The real user id of a running process."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise LabError(f"process {pid} has no Uid line")


class FleetProcess:
    """The clients' host process; its output lines are collected by a reader thread."""

    def __init__(self, proc: subprocess.Popen, mode: str) -> None:
        self.proc, self.mode = proc, mode
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip())

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, text: str, timeout_s: float) -> None:
        """Block until an output line contains `text` (or the process ends / time is up)."""
        deadline = time.monotonic() + timeout_s
        while not any(text in line for line in self.lines):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise LabError(f"the {self.mode} process never printed {text!r}:\n{self.output[-3000:]}")
            time.sleep(0.1)

    def wait(self, timeout_s: float) -> int:
        code = self.proc.wait(timeout_s)
        self._reader.join(5)
        return code

    def check(self, timeout_s: float = 600.0) -> None:
        if self.wait(timeout_s) != 0:
            raise LabError(f"the {self.mode} process failed:\n{self.output[-3000:]}")
