"""The parties and the dealer start and serve without loading torch (docs/ARCHITECTURE.md).

The dealer (`starfish dealer`) and the parties (`python -m party0`, `python -m party1`) run
as real processes of a local deployment; once the parties are healthy and a client has
registered, none of the three has torch's shared library mapped (`/proc/<pid>/maps`): the
configuration, the `[privacy]` settings, the services and the MPC plane's framing import
nothing that loads it. torch is loaded where a tensor is made: by the job workers
(separate processes), by the dealer's first correlated value, by a party's upload check.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.local import LocalDeployment

pytestmark = pytest.mark.timeout(180)

TORCH_LIBRARY = "libtorch"


def _mapped_torch(pid: int) -> list[str]:
    """The torch libraries mapped into process `pid` (empty when torch was never imported)."""
    maps = Path(f"/proc/{pid}/maps").read_text()
    return sorted({line.split()[-1] for line in maps.splitlines() if TORCH_LIBRARY in line})


def test_parties_and_dealer_start_without_torch(tmp_path):
    dep = LocalDeployment(tmp_path / "run", clients=["client0"], privacy={"dp": False})
    try:
        dep.start()
        with dep.client("client0") as c:
            c.register()
        for role in (0, 1):
            assert dep.procs[role].poll() is None
            assert _mapped_torch(dep.procs[role].pid) == [], f"party{role} loaded torch at start"
        assert dep.dealer_proc is not None and dep.dealer_proc.poll() is None
        assert _mapped_torch(dep.dealer_proc.pid) == [], "the dealer loaded torch at start"
    finally:
        dep.stop()
        dep.stop_dealer()


def test_the_check_sees_torch_in_a_process_that_loads_it():
    """The probe is not blind: this test process has imported torch (through its fixtures' packages)."""
    import os

    import torch  # noqa: F401

    assert _mapped_torch(os.getpid())
