"""Settings of Stage II unlearning jobs: the `[jobs]` table of a party's TOML config.

Both parties read the same keys. party0's MPC listener (`mpc_host`, `mpc_port`) and its
deadlines decide the session; party1 connects where party0's StartJob says. Each party
names the dealer service it trusts (`dealer`, `dealer_identity`); party1 refuses a job
whose dealer identity differs from its own configuration. Every key: docs/JOBS.md §9 and
docs/DEPLOY.md.
"""

from __future__ import annotations

import ipaddress
import math
from dataclasses import dataclass

STEP_CHECK_MODES = ("op", "boundary", "off")
STANDBY_MODES = ("always", "on_demand", "off")
DEMO_DEALER_LABEL = "single-operator demo: dealer not independent"


def _host_port(value: str, key: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"jobs.{key} must be 'host:port' with a port in 1..65535, got {value!r}")
    return host, int(port)


def _is_wildcard(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


@dataclass(frozen=True)
class JobConfig:
    """Job runner settings (docs/JOBS.md §9)."""

    #: the address party0's worker listens on for party1 (the MPC plane, TLS); only this
    #: interface is bound. A wildcard (0.0.0.0, ::) needs `mpc_advertise`
    mpc_host: str = "127.0.0.1"
    #: port of that listener; 0 = any free port per session attempt (announced in StartJob).
    #: Set a fixed port when a firewall must name it; every attempt then reuses it
    mpc_port: int = 0
    #: the host party1 is told to connect to ("" = mpc_host)
    mpc_advertise: str = ""
    #: the dealer service, "host:port" ("" = none: jobs are refused until it is set)
    dealer: str = ""
    #: the common name the dealer's certificate must carry
    dealer_identity: str = "dealer"
    #: false only for a single-operator demo (`starfish up`): reports then say the dealer
    #: is not run by an independent operator
    dealer_independent: bool = True
    #: bound on every wait inside the MPC session (rendezvous, exchanges, dealer)
    session_timeout_s: float = 60.0
    #: lock-step check of the CrypTen backend (mpc.crypten_backend.STEP_CHECK_MODES)
    step_check: str = "op"
    #: deadline of a warm-up/correction task, seconds after it is posted
    task_timeout_s: float = 120.0
    #: how often a worker looks for task answers in its party's store
    task_poll_s: float = 0.1
    #: session attempts per job before it fails (each resumes from the last common checkpoint)
    max_attempts: int = 5
    #: pause between two session attempts
    retry_backoff_s: float = 1.0
    #: how often the job runner looks at its worker and at the peer
    poll_s: float = 0.2
    #: keep one worker started in advance, so a session attempt does not wait for torch and
    #: CrypTen to import (seconds; much more on a loaded host): "always" from party start,
    #: "on_demand" from the first job on (party0: when a job is filed; party1: after its
    #: first session), "off"
    standby: str = "on_demand"
    #: how long a job waits for the open training round to end before it pauses training:
    #: the round then closes with the consistent uploads it holds (if at least
    #: rounds.min_clients) or is abandoned (docs/JOBS.md §2)
    pause_training_after_s: float = 300.0
    #: a failed job's checkpoints are removed this long after it failed at the latest
    #: (an identical re-filed request adopts them before; server.jobs.adoption)
    keep_failed_checkpoints_s: float = 7 * 24 * 3600.0

    def __post_init__(self) -> None:
        if self.dealer == "spawn":
            raise ValueError(
                "jobs.dealer = 'spawn' is gone: the dealer is a service of its own operator; run "
                "`starfish dealer --config dealer.toml` and set jobs.dealer = 'host:port' (docs/DEPLOY.md)"
            )
        if self.dealer:
            _host_port(self.dealer, "dealer")
        if not self.dealer_identity:
            raise ValueError("jobs.dealer_identity must name the dealer's certificate")
        if _is_wildcard(self.mpc_host) and not self.mpc_advertise:
            raise ValueError(f"jobs.mpc_host = {self.mpc_host!r} listens everywhere: set jobs.mpc_advertise")
        if self.step_check not in STEP_CHECK_MODES:
            raise ValueError(f"jobs.step_check must be one of {STEP_CHECK_MODES}, got {self.step_check!r}")
        if self.standby not in STANDBY_MODES:
            raise ValueError(f"jobs.standby must be one of {STANDBY_MODES}, got {self.standby!r}")
        if not 0 <= self.mpc_port < 65536:
            raise ValueError(f"jobs.mpc_port must be in 0..65535, got {self.mpc_port}")
        for name in (
            "session_timeout_s",
            "task_timeout_s",
            "task_poll_s",
            "retry_backoff_s",
            "poll_s",
            "pause_training_after_s",
            "keep_failed_checkpoints_s",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
                raise ValueError(f"jobs.{name} must be a positive finite number, got {value!r}")
        if self.max_attempts < 1:
            raise ValueError("jobs.max_attempts must be at least 1")

    @property
    def dealer_address(self) -> tuple[str, int]:
        """(host, port) of the dealer service; raises when none is configured."""
        if not self.dealer:
            raise ValueError("no dealer service is configured: set [jobs] dealer = 'host:port' (docs/DEPLOY.md)")
        return _host_port(self.dealer, "dealer")

    @property
    def advertised_host(self) -> str:
        return self.mpc_advertise or self.mpc_host

    @property
    def dealer_label(self) -> str:
        """How JobStatus and the report name the dealer."""
        if not self.dealer_independent:
            return DEMO_DEALER_LABEL
        return f"dealer {self.dealer_identity!r} at {self.dealer} (independent operator)"
