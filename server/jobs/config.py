"""Settings of Stage II unlearning jobs: the `[jobs]` table of a party's TOML config.

Both parties read the same keys; party0's values decide the session (rendezvous host and
port, deadlines) and party1 follows what party0 sends over the peer channel.
"""

from __future__ import annotations

from dataclasses import dataclass

#: how the dealer (CrypTen TTP, the third operator) joins a job's session
DEALER_MODES = ("spawn",)
STEP_CHECK_MODES = ("op", "boundary", "off")
STANDBY_MODES = ("always", "on_demand", "off")


@dataclass(frozen=True)
class JobConfig:
    """Job runner settings (DESIGN §2, §6)."""

    #: address party0's worker binds for the CrypTen rendezvous (rank 0 hosts it)
    mpc_host: str = "127.0.0.1"
    #: first rendezvous port; 0 = a free port per session attempt (agreed over the peer channel)
    mpc_port: int = 0
    #: bound on every wait inside the MPC session (rendezvous, collectives, idle dealer)
    session_timeout_s: float = 60.0
    #: "spawn": party0 starts a dealer process per session attempt — in a local deployment
    #: this process stands in for the third operator's dealer
    dealer: str = "spawn"
    #: lock-step check of the CrypTen backend (mpc.crypten_backend.STEP_CHECK_MODES)
    step_check: str = "op"
    #: allow a non-loopback gloo rendezvous (private network or tunnel only)
    allow_remote: bool = False
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
    #: keep one worker (and on party0 one dealer) started in advance, so a session attempt
    #: does not wait for torch and CrypTen to import (seconds; much more on a loaded host):
    #: "always" from party start, "on_demand" from the first job on (party0: when a job is
    #: filed; party1: after its first session), "off"
    standby: str = "on_demand"

    def __post_init__(self) -> None:
        if self.dealer not in DEALER_MODES:
            raise ValueError(f"jobs.dealer must be one of {DEALER_MODES}, got {self.dealer!r}")
        if self.step_check not in STEP_CHECK_MODES:
            raise ValueError(f"jobs.step_check must be one of {STEP_CHECK_MODES}, got {self.step_check!r}")
        if self.standby not in STANDBY_MODES:
            raise ValueError(f"jobs.standby must be one of {STANDBY_MODES}, got {self.standby!r}")
        if not 0 <= self.mpc_port < 65536:
            raise ValueError(f"jobs.mpc_port must be in 0..65535, got {self.mpc_port}")
        for name in ("session_timeout_s", "task_timeout_s", "task_poll_s", "retry_backoff_s", "poll_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"jobs.{name} must be positive")
        if self.max_attempts < 1:
            raise ValueError("jobs.max_attempts must be at least 1")
