"""A dealer process for one job session: `python -m server.jobs.dealer`.

It imports CrypTen, then waits for one JSON line on stdin naming the session
({"host", "port", "precision_bits", "timeout_s", "allow_remote"}), serves it as CrypTen's
TTP (rank 2, `mpc.dealer.run_dealer`) and exits. In a local deployment party0 starts
these processes as the stand-in for the third operator's dealer (one per session
attempt, started in advance so the import is off the critical path); the dealer only
hands out correlated randomness and never receives data shares. If its stdin closes
before a session is named (party0 went away), it exits.
"""

from __future__ import annotations

import json
import logging
import sys


def main() -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s dealer %(levelname)s %(message)s")
    from mpc.dealer import run_dealer
    from mpc.session import DEALER_RANK, SessionConfig

    line = sys.stdin.readline()
    if not line:
        return 0
    session = json.loads(line)
    run_dealer(
        SessionConfig(
            rank=DEALER_RANK,
            host=str(session["host"]),
            port=int(session["port"]),
            precision_bits=int(session["precision_bits"]),
            timeout_s=float(session["timeout_s"]),
            allow_remote=bool(session["allow_remote"]),
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
