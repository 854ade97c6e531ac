"""A whole deployment on one machine: certificates, credentials, configs and the party
processes on loopback with free ports (used by `starfish up`, the tests and the bench).

Layout under `root`::

    certs/            CA, party TLS and erasure-signing certificates (server.certs)
    credentials.json  admin token and client tokens (mode 0600; tokens never logged)
    party0.toml, party1.toml
    party0/, party1/  data dirs
    logs/partyN.log
    outbox/<client>/  the SDK outbox of each client made by `client()`
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from server.certs import make_certs
from server.config import token_digest

REPO_ROOT = Path(__file__).resolve().parent.parent
HEALTH_TIMEOUT_S = 120.0  #: a party imports torch at start; slow on a loaded machine


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
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
    rounds: dict = field(default_factory=dict)  #: overrides of [rounds]
    limits: dict = field(default_factory=dict)  #: overrides of [limits]
    jobs: dict = field(default_factory=dict)  #: overrides of [jobs]
    admission: dict = field(default_factory=dict)  #: overrides of [admission]
    observability: dict = field(default_factory=dict)  #: overrides of [observability]
    precision_bits: int = 16
    same_identity_as: "LocalDeployment | None" = None  #: reuse that deployment's certificates and tokens
    procs: dict[int, subprocess.Popen] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.root = Path(self.root).resolve()
        self.cred_path = self.root / "credentials.json"
        if self.cred_path.exists():
            self.creds = json.loads(self.cred_path.read_text())
            return
        self.root.mkdir(parents=True, exist_ok=True)
        other = self.same_identity_as
        if other is not None:
            shutil.copytree(other.root / "certs", self.root / "certs")
        else:
            make_certs(self.root / "certs")
        self.creds = {
            "admin_token": other.creds["admin_token"] if other else secrets.token_urlsafe(32),
            "clients": dict(other.creds["clients"]) if other else {c: secrets.token_urlsafe(32) for c in self.clients},
            "ports": {
                "client0": free_port(),
                "client1": free_port(),
                "peer0": free_port(),
                "peer1": free_port(),
                "dealer": free_port(),
                "metrics0": free_port(),
                "metrics1": free_port(),
            },
        }
        fd = os.open(self.cred_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(self.creds, fh, indent=1)
        for role in (0, 1):
            self.config_path(role).write_text(render_config(self._config(role)))

    def _config(self, role: int) -> dict:
        ports = self.creds["ports"]
        return {
            "role": role,
            "listen": f"127.0.0.1:{ports[f'client{role}']}",
            "peer_listen": f"127.0.0.1:{ports[f'peer{role}']}",
            "peer_address": f"127.0.0.1:{ports[f'peer{1 - role}']}",
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
            "jobs": dict(self.jobs),
            "admission": dict(self.admission),
            "auth": {
                "admin_token_sha256": token_digest(self.creds["admin_token"]),
                "clients": {c: token_digest(t) for c, t in self.creds["clients"].items()},
            },
        }

    # -- paths and addresses -------------------------------------------------------------
    def config_path(self, role: int) -> Path:
        return self.root / f"party{role}.toml"

    def data_dir(self, role: int) -> Path:
        return self.root / f"party{role}"

    def address(self, role: int) -> str:
        return f"127.0.0.1:{self.creds['ports'][f'client{role}']}"

    def metrics_url(self, role: int) -> str:
        return f"http://127.0.0.1:{self.creds['ports'][f'metrics{role}']}/metrics"

    @property
    def ca_cert(self) -> Path:
        return self.root / "certs" / "ca.pem"

    # -- processes -----------------------------------------------------------------------
    def start(self, role: int | None = None) -> None:
        (self.root / "logs").mkdir(exist_ok=True)
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

    def wait_healthy(self, role: int, timeout_s: float = HEALTH_TIMEOUT_S) -> None:
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
                        stub.Check(health_pb2.HealthCheckRequest(), timeout=1).status
                        == health_pb2.HealthCheckResponse.SERVING
                    ):
                        return
                except grpc.RpcError:
                    pass
                time.sleep(0.1)
        raise TimeoutError(f"party{role} not serving on {self.address(role)} after {timeout_s} s")

    def stop(self, role: int | None = None, sig: int = signal.SIGTERM, timeout_s: float = 15.0) -> None:
        for r in (0, 1) if role is None else (role,):
            proc = self.procs.pop(r, None)
            if proc is None or proc.poll() is not None:
                continue
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

        return AdminClient(self.address(0), self.creds["admin_token"], self.ca_cert)

    @property
    def admin_metadata(self) -> tuple[tuple[str, str], ...]:
        return (("x-starfish-admin-token", self.creds["admin_token"]),)
