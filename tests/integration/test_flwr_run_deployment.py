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

import pytest

from helpers.flwr_example import SHORT, check_certificate, check_flower_log, run_script

pytestmark = pytest.mark.timeout(900)
#: the admin's job without a recovery round: one relay of tasks to the SuperNodes fewer (the
#: simulation test runs the defaults); the run config's JSON without spaces (one token)
NO_RECOVERY = """starfish-unlearn-parameters='{"recovery_rounds":0}'"""


def test_flwr_run_on_the_deployment_engine_with_real_supernodes(tmp_path):
    out = tmp_path / "dep"
    output = run_script("deployment.sh", out, f"{SHORT} min-available-nodes=4 starfish-forget='client2' {NO_RECOVERY}")
    job_id = check_certificate(out, "client2")
    check_flower_log(output, job_id)
    assert "Starfish: relaying" in output  # the job's tasks went to the SuperNodes through Flower
