"""The demo's processes: the dealer service, party0 and party1 on loopback (TLS), started
and always stopped with `harness.local.LocalDeployment`, the helper behind `starfish up`.
The dealer is a process of its own (`starfish dealer`), not a child of a party — but one
operator runs all three here: a single-operator demo, so the dealer is not independent.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from harness.local import LocalDeployment

#: how long the parties may take to serve (beyond LocalDeployment's own wait) on a busy machine
START_TIMEOUT_S = 120.0
#: slack of the 2PC session timeout over the task deadline (a session idles while clients answer)
SESSION_SLACK_S = 60.0


class DemoServices:
    """The dealer service, party0 and party1 (and, started by the parties, the job workers) for one demo run."""

    def __init__(
        self,
        root: Path,
        client_ids: list[str],
        rounds: int,
        round_deadline_s: float,
        task_deadline_s: float,
        probe: str = "",
    ) -> None:
        self.deployment = LocalDeployment(
            root,
            clients=list(client_ids),
            # every client must upload before a round closes; training stops after T rounds
            rounds={
                "deadline_s": round_deadline_s,
                "min_clients": len(client_ids),
                "max_rounds": rounds,
                "poll_s": 0.05,
            },
            # standby "always": each party starts its job worker ahead of the job, so torch and
            # CrypTen import while Stage I runs
            jobs={
                "task_timeout_s": task_deadline_s,
                "session_timeout_s": task_deadline_s + SESSION_SLACK_S,
                "standby": "always",
            },
            evaluation={"probe": probe},  # named on the page beside the clients' probe hits
        )

    @property
    def root(self) -> Path:
        return self.deployment.root

    def start(self) -> None:
        dep = self.deployment
        try:
            dep.start()
        except TimeoutError:  # a busy machine starts Python slowly: give the parties longer
            for role in (0, 1):
                dep.wait_healthy(role, START_TIMEOUT_S)

    def check_alive(self) -> None:
        """Raise RuntimeError naming the process (and its log) that exited."""
        dep = self.deployment
        for name, proc in [*((f"party{r}", p) for r, p in dep.procs.items()), ("dealer", dep.dealer_proc)]:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"{name} exited with code {proc.returncode} (its log: {name}.log)")

    def stop(self) -> None:
        self.deployment.stop()

    def describe(self) -> list[str]:
        dep = self.deployment
        return [
            f"party0 (leader) pid {dep.procs[0].pid} on {dep.address(0)}, admin API on {dep.admin_address} (TLS)",
            f"party1 (helper)            pid {dep.procs[1].pid} on {dep.address(1)} (TLS)",
            f"dealer service (2PC randomness) pid {dep.dealer_proc.pid} on {dep.dealer_address} (TLS; "
            "single-operator demo: dealer not independent)",
            "one job worker per party: started by the parties, on standby for the job",
            f"deployment dir {dep.root} (certificates, credentials, stores, logs)",
        ]

    def job_pids(self) -> dict[str, list[int]]:
        """Pids of the processes of the jobs' 2PC sessions: the dealer service and each party's workers."""

        def pids(role: int, name: str) -> list[int]:
            return [int(p.read_text()) for p in sorted((self.deployment.data_dir(role) / "jobs").glob(f"*/{name}.pid"))]

        dealer = [self.deployment.dealer_proc.pid] if self.deployment.dealer_proc is not None else []
        return {"dealer": dealer, "party0 worker": pids(0, "worker"), "party1 worker": pids(1, "worker")}

    def collect_logs(self, dest: Path) -> None:
        """Copy the party and dealer logs and the job logs (workers) to `dest`."""
        logs = self.root / "logs"
        if logs.is_dir():
            shutil.copytree(logs, dest, dirs_exist_ok=True)
        for role in (0, 1):
            for log in (self.deployment.data_dir(role) / "jobs").glob("**/*.log"):
                target = dest / f"party{role}-{log.parent.name}-{log.name}"
                shutil.copyfile(log, target)
