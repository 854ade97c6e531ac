"""Fault-injection tests: real party processes on loopback (free ports), real SDK clients.

The Stage I helpers of tests/integration (plaintext FedAvg, tolerance, waiting for a commit)
are shared with these tests.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "integration"))
