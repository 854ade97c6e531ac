"""deploy/runtime.lock: every entry is pinned with a sha256, the installed runtime is
exactly what it pins, and everything the parties, the dealer and the SDK import is in it."""

from __future__ import annotations

import importlib.metadata as md
import json
import re
import subprocess
import sys

from harness.local import REPO_ROOT

LOCK = REPO_ROOT / "deploy" / "runtime.lock"
RUNTIME = ("server.runtime", "mpc.plane.dealer_service", "mpc.crypten_backend", "client_sdk", "starfish_cli.entry")
NOT_LOCKED = {"torch", "starfish-unlearning"}  #: torch: see the lock's header; the project itself


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _entries() -> dict[str, str]:
    text = LOCK.read_text()
    entries = re.findall(r"^([A-Za-z0-9._-]+)==(\S+) \\\n\s+--hash=sha256:[0-9a-f]{64}$", text, re.M)
    assert len(entries) == len(re.findall(r"^[A-Za-z0-9]", text, re.M)), "an entry without a pin or a hash"
    return {_norm(n): v for n, v in entries}


def test_the_installed_runtime_is_the_locked_one():
    for name, version in _entries().items():
        assert md.version(name) == version, f"{name}: installed {md.version(name)}, locked {version}"


_PROBE = """
import importlib, importlib.metadata as md, json, sys
for module in sys.argv[1:]:
    importlib.import_module(module)
dists = md.packages_distributions()
print(json.dumps(sorted({d for m in list(sys.modules) for d in dists.get(m.split(".")[0], [])})))
"""


def test_everything_the_runtime_imports_is_locked():
    """In a fresh interpreter (not this test run's, which has the test tools loaded)."""
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, *RUNTIME], capture_output=True, text=True, check=True, cwd=REPO_ROOT, timeout=300
    ).stdout
    imported = {_norm(d) for d in json.loads(out)}
    missing = imported - set(_entries()) - NOT_LOCKED
    assert not missing, f"imported by the runtime but not in {LOCK.name}: {sorted(missing)}"
