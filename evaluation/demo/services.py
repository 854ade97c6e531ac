"""The demo's processes: dealer, party0 and party1 on loopback, started and always stopped
with the code of `starfish up` (`server.local.LocalDeployment` for the parties, the same
dealer launcher), plus the demo's settings for Stage I rounds.
"""
from __future__ import annotations

import subprocess
from pathlib import Path
from types import TracebackType

from server.local import LocalDeployment
from starfish.commands.up import _start_dealer

#: how long the parties may take to serve (beyond LocalDeployment's own wait) on a busy machine
START_TIMEOUT_S = 120.0
#: how long the dealer may take to exit after SIGTERM before it is killed
DEALER_STOP_S = 10.0


class DemoServices:
    """dealer + party0 + party1 for one demo run (a context manager: leaving it stops all)."""

    def __init__(self, root: Path, client_ids: list[str], rounds: int, round_deadline_s: float) -> None:
        self.deployment = LocalDeployment(
            root, clients=list(client_ids),
            # every client must upload before a round closes; training stops after T rounds
            rounds={"deadline_s": round_deadline_s, "min_clients": len(client_ids), "max_rounds": rounds, "poll_s": 0.05},
        )
        self.dealer: subprocess.Popen | None = None

    @property
    def root(self) -> Path:
        return self.deployment.root

    def start(self) -> None:
        dep = self.deployment
        (dep.root / "logs").mkdir(exist_ok=True)
        self.dealer = _start_dealer(dep.root, dep.creds["ports"]["dealer"])
        try:
            dep.start()
        except TimeoutError:  # a busy machine starts Python slowly: give the parties longer
            for role in (0, 1):
                dep.wait_healthy(role, START_TIMEOUT_S)

    def check_alive(self) -> None:
        """Raise RuntimeError naming the process (and its log) that exited."""
        for role, proc in self.deployment.procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"party{role} exited with code {proc.returncode}; see {self.root / 'logs' / f'party{role}.log'}")

    def stop(self) -> None:
        self.deployment.stop()
        if self.dealer is not None and self.dealer.poll() is None:
            self.dealer.terminate()
            try:
                self.dealer.wait(DEALER_STOP_S)
            except subprocess.TimeoutExpired:
                self.dealer.kill()
                self.dealer.wait()
        self.dealer = None

    def __enter__(self) -> "DemoServices":
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def describe(self) -> list[str]:
        dep = self.deployment
        return [
            f"party0 (leader, admin API) pid {dep.procs[0].pid} on {dep.address(0)} (TLS)",
            f"party1 (helper)            pid {dep.procs[1].pid} on {dep.address(1)} (TLS)",
            f"dealer (2PC randomness)    pid {self.dealer.pid} on rendezvous port {dep.creds['ports']['dealer']}"
            if self.dealer is not None else "dealer: not part of this build",
            f"deployment dir {dep.root} (certificates, credentials, data, logs)",
        ]
