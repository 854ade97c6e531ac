"""The example app run with `flwr run .` on Flower's simulation engine (the example's
`examples/flower/simulation.sh`, in a loopback-only network namespace) against the Starfish
parties as real processes: a ClientApp asks for its own unlearning in its train reply
(client1, from Starfish round 2); the run must end with an erasure certificate that verifies
offline against the deployment's CA and names the model the parties installed, and
Starfish's lines (the job, its federated evaluation, the round after it) in Flower's output.
(The deployment engine: test_flwr_run_deployment.py; a file each so they run in parallel.)
"""

from __future__ import annotations

import re

import pytest

from helpers.flwr_example import SHORT, check_certificate, check_flower_log, run_script

pytestmark = pytest.mark.timeout(900)


def test_flwr_run_on_the_simulation_engine_with_a_client_asking_for_its_unlearning(tmp_path):
    out = tmp_path / "sim"
    output = run_script("simulation.sh", out, f"{SHORT} starfish-forget='none' unlearn-me-partition=1")
    job_id = check_certificate(out, "client1")
    check_flower_log(output, job_id)
    assert re.search(rf"client1 asked for the unlearning of its own data: job {job_id}", output)
