"""`flwr run .` of the example app (examples/flower) the way a Flower developer runs it:
the example's own scripts in a loopback-only network namespace, and the checks of what they
leave (the erasure certificate against the parties' stores, Starfish's lines in Flower's output).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from client_sdk.evidence import verify_certificate
from harness.local import LocalDeployment
from server.store import Store
from starfish_flower import sandbox

from helpers.ray_dir import private_ray_dir

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "flower"
#: two Starfish rounds, the unlearning, one round after it
SHORT = "fraction-train=1.0 num-server-rounds=2 rounds-after=1"


def run_script(script: str, out: Path, run_config: str) -> str:
    """Run an example script in a loopback-only namespace; its combined output."""
    if not sandbox.available():
        pytest.fail("cannot create a network namespace (unshare --net): Flower and Ray would reach outside addresses")
    command = sandbox.loopback_only([str(EXAMPLE / script), str(out), run_config])
    try:
        with private_ray_dir() as ray_env:
            env = {**os.environ, **ray_env, "PYTHON": sys.executable}
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=840, check=False)
    except subprocess.TimeoutExpired as exc:
        tail = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
        pytest.fail(f"{script} did not end within {exc.timeout} s (logs in {out}):\n{tail[-4000:]}")
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    for failure in ("Traceback", "raised an exception", "Exit Code"):
        assert failure not in output, output[-4000:]
    return output


def check_certificate(out: Path, target: str) -> str:
    """The single certificate the ServerApp wrote verifies and names the parties' unlearned model."""
    files = sorted(out.glob("j*.json"))
    assert len(files) == 1, files
    dep = LocalDeployment(out / "deployment")
    check = verify_certificate(files[0], ca_certs=[dep.ca_cert])
    assert check.statement["job"]["targets"] == [target]
    unlearned = check.statement["models"]["unlearned"]
    for role in (0, 1):
        store = Store(dep.data_dir(role), role, readonly=True)
        assert store.global_model_hash(unlearned["global_round"]) == unlearned["hash"]
        assert store.latest_committed() == unlearned["global_round"] + 1  # one more round from M̂
        assert target not in store.round_members(store.latest_committed())
    return check.statement["job"]["id"]


def check_flower_log(output: str, job_id: str) -> None:
    """Starfish's progress and summary lines are in Flower's own output."""
    for line in (
        "Starfish round 1 committed: 4 members",
        f"Starfish job {job_id}: ",
        f"Starfish: unlearning job {job_id} succeeded",
        f"Starfish job {job_id}: federated evaluation by 3 clients: M̂ accuracy ",  # the app's evaluate, via Flower
        f"Starfish: erasure certificate of job {job_id} verified",
        "Starfish round 4 committed: 3 members",
    ):
        starfish = "\n".join(text for text in output.splitlines() if "Starfish" in text)
        assert line in output, f"{line!r} missing from Flower's output; its Starfish lines:\n{starfish[-4000:]}"
