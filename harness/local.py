"""A whole deployment on one machine: certificates, credentials, configs and the three
operators' processes — the dealer service, party0 and party1 — on loopback with free
ports (used by `starfish up`, the tests and the bench). One operator runs all three
here, so the party configs say `dealer_independent = false` and every job status and
report is labelled "single-operator demo: dealer not independent". The dealer is a
process of its own (`starfish dealer --config dealer.toml`), not a child of a party.

Layout under `root`::

    certs/            the CA; TLS certificates of party0, party1, dealer; the parties' signing certificates
                      (mpc.plane.certificate_authority)
    credentials.json  admin token, client tokens and each client's principal (mode 0600; tokens never logged)
    party0.toml, party1.toml, dealer.toml
    party0/, party1/  data dirs
    logs/partyN.log, logs/dealer.log
    outbox/<client>/  the SDK outbox of each client made by `client()`
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from mpc.plane.certificate_authority import make_certs
from mpc.ports import free_port
from server.config import token_digest
from server.file_modes import private_dir
from server.readiness import LIVENESS

REPO_ROOT = Path(__file__).resolve().parent.parent
HEALTH_TIMEOUT_S = 120.0  #: a party imports torch at start; slow on a loaded machine


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return json.dumps(str(v))


def render_config(values: dict) -> str:
    """Write a flat/one-level-nested dict as TOML (strings, numbers, booleans, tables)."""
    lines = [f"{k} = {_toml_value(v)}" for k, v in values.items() if not isinstance(v, dict)]
    for k, v in values.items():
        if isinstance(v, dict):
            flat = {kk: vv for kk, vv in v.items() if not isinstance(vv, dict)}
            lines += ["", f"[{k}]"] + [f"{json.dumps(kk)} = {_toml_value(vv)}" for kk, vv in flat.items()]
            for kk, vv in v.items():
                if isinstance(vv, dict):
                    lines += ["", f"[{k}.{kk}]"] + [f"{json.dumps(a)} = {_toml_value(b)}" for a, b in vv.items()]
    return "\n".join(lines) + "\n"


@dataclass
class LocalDeployment:
    root: Path
    clients: list[str] = field(default_factory=lambda: [f"client{i}" for i in range(5)])
    #: client → the principal (organisation) its credential is issued to, written to both parties'
    #: [auth.principals] (docs/PRIVACY.md); a client not named here is enrolled as its own principal
    principals: dict[str, str] = field(default_factory=dict)
    rounds: dict = field(default_factory=dict)  #: overrides of [rounds]
    limits: dict = field(default_factory=dict)  #: overrides of [limits]
    jobs: dict = field(default_factory=dict)  #: overrides of [jobs]
    admission: dict = field(default_factory=dict)  #: overrides of [admission]
    observability: dict = field(default_factory=dict)  #: overrides of [observability]
    unlearning: dict = field(default_factory=dict)  #: [unlearning]: operator parameters and bounds
    privacy: dict = field(default_factory=dict)  #: overrides of [privacy]: min_cohort and DP (docs/PRIVACY.md)
    validation: dict = field(default_factory=dict)  #: overrides of [validation] (docs/SERVICE.md, "Input validation")
    evaluation: dict = field(default_factory=dict)  #: overrides of [evaluation] (docs/JOBS.md §7)
    precision_bits: int = 16
    same_identity_as: LocalDeployment | None = None  #: reuse that deployment's certificates and tokens
    procs: dict[int, subprocess.Popen] = field(default_factory=dict)
    dealer_proc: subprocess.Popen | None = None

    def __post_init__(self) -> None:
        self.root = Path(self.root).resolve()
        self.cred_path = self.root / "credentials.json"
        if self.cred_path.exists():
            self.creds = json.loads(self.cred_path.read_text())
            return
        private_dir(self.root)  # 0700: certificates' keys, credentials, both stores (server.file_modes)
        for role in (0, 1):
            private_dir(self.data_dir(role))
        other = self.same_identity_as
        if other is not None:
            shutil.copytree(other.root / "certs", self.root / "certs")
        else:
            make_certs(self.root / "certs")
        self.creds = {
            "admin_token": other.creds["admin_token"] if other else secrets.token_urlsafe(32),
            "clients": dict(other.creds["clients"]) if other else {c: secrets.token_urlsafe(32) for c in self.clients},
            "principals": dict(other.creds.get("principals", {}))
            if other
            else {c: self.principals.get(c, c) for c in self.clients},
            "ports": {
                "client0": free_port(),
                "client1": free_port(),
                "admin0": free_port(),
                "peer0": free_port(),
                "peer1": free_port(),
                "dealer": free_port(),
                "dealer_health": free_port(),
                "metrics0": free_port(),
                "metrics1": free_port(),
            },
        }
        fd = os.open(self.cred_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(self.creds, fh, indent=1)
        for role in (0, 1):
            self.config_path(role).write_text(render_config(self._config(role)))
        self.dealer_config_path.write_text(render_config(self._dealer_config()))

    def _dealer_config(self) -> dict:
        return {
            "listen": f"127.0.0.1:{self.creds['ports']['dealer']}",
            "tls": {"ca": "certs/ca.pem", "cert": "certs/dealer.pem", "key": "certs/dealer.key"},
            "parties": {"party0": "party0", "party1": "party1"},
            "observability": {"health_listen": f"127.0.0.1:{self.creds['ports']['dealer_health']}"},
        }

    def _config(self, role: int) -> dict:
        ports = self.creds["ports"]
        return {
            "role": role,
            "listen": f"127.0.0.1:{ports[f'client{role}']}",
            "peer_listen": f"127.0.0.1:{ports[f'peer{role}']}",
            "peer_address": f"127.0.0.1:{ports[f'peer{1 - role}']}",
            **({"admin_listen": self.admin_address} if role == 0 else {}),
            "data_dir": f"party{role}",
            "tls": {
                "ca": "certs/ca.pem",
                "cert": f"certs/party{role}.pem",
                "key": f"certs/party{role}.key",
                "peer_name": f"party{1 - role}",
            },
            "signing": {"cert": f"certs/party{role}-signing.pem", "key": f"certs/party{role}-signing.key"},
            "observability": {"metrics_listen": f"127.0.0.1:{ports[f'metrics{role}']}", **self.observability},
            "fixed_point": {"precision_bits": self.precision_bits},
            "rounds": dict(self.rounds),
            "limits": dict(self.limits),
            "jobs": {
                "dealer": f"127.0.0.1:{ports['dealer']}",
                "dealer_identity": "dealer",
                "dealer_independent": False,
                **self.jobs,
            },
            "admission": dict(self.admission),
            "unlearning": dict(self.unlearning),
            "privacy": dict(self.privacy),
            "validation": dict(self.validation),
            "evaluation": dict(self.evaluation),
            "auth": {
                "admin_token_sha256": token_digest(self.creds["admin_token"]),
                "clients": {c: token_digest(t) for c, t in self.creds["clients"].items()},
                "principals": dict(self.creds.get("principals", {})),
            },
        }

    # -- paths and addresses -------------------------------------------------------------
    def config_path(self, role: int) -> Path:
        return self.root / f"party{role}.toml"

    @property
    def dealer_config_path(self) -> Path:
        return self.root / "dealer.toml"

    @property
    def dealer_address(self) -> str:
        return f"127.0.0.1:{self.creds['ports']['dealer']}"

    def data_dir(self, role: int) -> Path:
        return self.root / f"party{role}"

    def address(self, role: int) -> str:
        return f"127.0.0.1:{self.creds['ports'][f'client{role}']}"

    @property
    def admin_address(self) -> str:
        """party0's admin API (`admin_listen`: its own listener, server.admin_gate)."""
        return f"127.0.0.1:{self.creds['ports']['admin0']}"

    def metrics_url(self, role: int) -> str:
        return f"http://127.0.0.1:{self.creds['ports'][f'metrics{role}']}/metrics"

    @property
    def ca_cert(self) -> Path:
        return self.root / "certs" / "ca.pem"

    # -- processes -----------------------------------------------------------------------
    def start(self, role: int | None = None) -> None:
        """Start party `role`, or (None) the dealer service and both parties."""
        private_dir(self.root / "logs")
        if role is None:
            self.start_dealer()
        for r in (0, 1) if role is None else (role,):
            log = open(self.root / "logs" / f"party{r}.log", "ab")
            self.procs[r] = subprocess.Popen(
                [sys.executable, "-m", f"party{r}", "--config", str(self.config_path(r))],
                cwd=REPO_ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
            log.close()
        for r in (0, 1) if role is None else (role,):
            self.wait_healthy(r)

    def start_dealer(self, timeout_s: float = HEALTH_TIMEOUT_S) -> None:
        """Start the dealer service (once) and wait until it listens."""
        if self.dealer_proc is not None and self.dealer_proc.poll() is None:
            return
        path = self.root / "logs" / "dealer.log"
        offset = path.stat().st_size if path.exists() else 0
        with open(path, "ab") as log:
            self.dealer_proc = subprocess.Popen(
                [sys.executable, "-m", "starfish_cli", "dealer", "--config", str(self.dealer_config_path)],
                cwd=REPO_ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        end = time.time() + timeout_s
        while b"dealer listening on" not in path.read_bytes()[offset:]:
            if self.dealer_proc.poll() is not None:
                raise RuntimeError(f"the dealer exited with {self.dealer_proc.returncode}; see {path}")
            if time.time() > end:
                raise TimeoutError(f"the dealer did not listen on {self.dealer_address} after {timeout_s} s")
            time.sleep(0.1)

    def stop_dealer(self, timeout_s: float = 15.0) -> None:
        proc, self.dealer_proc = self.dealer_proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def wait_healthy(self, role: int, timeout_s: float = HEALTH_TIMEOUT_S) -> None:
        """Wait until party `role` serves (its liveness service; it may not make progress yet,
        e.g. while the other party starts: server.readiness)."""
        creds = grpc.ssl_channel_credentials(root_certificates=self.ca_cert.read_bytes())
        end = time.time() + timeout_s
        with grpc.secure_channel(self.address(role), creds) as ch:
            stub = health_pb2_grpc.HealthStub(ch)
            while time.time() < end:
                proc = self.procs.get(role)
                if proc is not None and proc.poll() is not None:
                    raise RuntimeError(
                        f"party{role} exited with {proc.returncode}; see {self.root}/logs/party{role}.log"
                    )
                try:
                    if (
                        stub.Check(health_pb2.HealthCheckRequest(service=LIVENESS), timeout=1).status
                        == health_pb2.HealthCheckResponse.SERVING
                    ):
                        return
                except grpc.RpcError:
                    pass
                time.sleep(0.1)
        raise TimeoutError(f"party{role} not serving on {self.address(role)} after {timeout_s} s")

    def stop(self, role: int | None = None, sig: int = signal.SIGTERM, timeout_s: float = 15.0) -> None:
        """Stop party `role`, or (None) both parties and then the dealer service."""
        if role is None:
            self.stop(0, sig, timeout_s)
            self.stop(1, sig, timeout_s)
            self.stop_dealer(timeout_s)
            return
        proc = self.procs.pop(role, None)
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(sig)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def kill(self, role: int) -> None:
        """Hard-kill a party (SIGKILL): no shutdown code runs."""
        self.stop(role, sig=signal.SIGKILL)

    # -- clients -------------------------------------------------------------------------
    def client(self, client_id: str, **kwargs):
        from client_sdk import Client

        kwargs.setdefault("outbox_dir", self.root / "outbox" / client_id)
        return Client(
            client_id, self.creds["clients"][client_id], self.address(0), self.address(1), self.ca_cert, **kwargs
        )

    def admin(self):
        from client_sdk.admin import AdminClient

        return AdminClient(self.admin_address, self.creds["admin_token"], self.ca_cert)

    @property
    def admin_metadata(self) -> tuple[tuple[str, str], ...]:
        return (("x-starfish-admin-token", self.creds["admin_token"]),)
