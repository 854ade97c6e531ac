"""The example app run with `flwr run .` on Flower's deployment engine (the example's
`examples/flower/deployment.sh`, in a loopback-only network namespace): a SuperLink and four
SuperNodes as real processes (TLS on loopback) against the Starfish parties as real
processes; the ServerApp files the unlearning of client2 as admin and relays the job's tasks
to the SuperNodes. The run must end with an erasure certificate that verifies offline
against the deployment's CA and names the model the parties installed, and Starfish's lines
(the job, its federated evaluation, the round after it) in Flower's output.
(The simulation engine: test_flwr_run_simulation.py.)
"""

from __future__ import annotations

import json

import pytest

from helpers.flwr_example import SHORT, check_certificate, check_flower_log, run_script
from helpers.plumbing_schedule import PLUMBING_SCHEDULE

pytestmark = pytest.mark.timeout(900)
#: the admin's job on the plumbing schedule: no recovery round (one relay of tasks to the
#: SuperNodes fewer) and fewer replayed rounds (the simulation test runs the defaults); the run
#: config's JSON without spaces (one token)
JOB = f"starfish-unlearn-parameters='{json.dumps(PLUMBING_SCHEDULE, separators=(',', ':'))}'"


def test_flwr_run_on_the_deployment_engine_with_real_supernodes(tmp_path):
    out = tmp_path / "dep"
    output = run_script("deployment.sh", out, f"{SHORT} min-available-nodes=4 starfish-forget='client2' {JOB}")
    job_id = check_certificate(out, "client2")
    check_flower_log(output, job_id)
    assert "Starfish: relaying" in output  # the job's tasks went to the SuperNodes through Flower
