"""The Flower integration sits above the client SDK: importing it loads no party runtime,
no unlearning algorithm and no CrypTen (a Flower client or server app needs none of them)."""

import subprocess
import sys

CHECK = """
import sys
import starfish_flower, starfish_flower.jobs, starfish_flower.rounds, starfish_flower.preflight
import starfish_flower.app_config, starfish_flower.certificates, starfish_flower.logs
bad = sorted(m for m in sys.modules if m.split(".")[0] in ("server", "unlearning", "crypten", "party0", "party1"))
print(",".join(bad))
"""


def test_importing_the_integration_loads_no_server_unlearning_or_crypten_module():
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == ""
