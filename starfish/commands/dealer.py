"""`starfish dealer`: run the dealer (CrypTen TTP provider) for one or more 2PC sessions.

Each session rendezvouses at tcp://HOST:PORT (a new port per session: the parties' rank-0
process hosts the rendezvous store, and reusing a port races with the previous session).
`--sessions N` serves N sessions on PORT, PORT+1, ...; 0 serves until interrupted.
"""

from __future__ import annotations

import argparse
import logging
import sys

from mpc.fixedpoint import DEFAULT_PRECISION_BITS
from mpc.session import DEFAULT_TIMEOUT_S


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("dealer", help="run the 2PC dealer (correlated randomness, never sees data)")
    parser.add_argument("--host", default="127.0.0.1", help="rendezvous host (loopback unless --allow-remote)")
    parser.add_argument("--port", type=int, required=True, help="rendezvous port of the first session")
    parser.add_argument("--sessions", type=int, default=1, help="sessions to serve on consecutive ports (0 = forever)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds to wait for the parties")
    parser.add_argument("--precision-bits", type=int, default=DEFAULT_PRECISION_BITS)
    parser.add_argument(
        "--allow-remote", action="store_true", help="allow a non-loopback rendezvous (private network only)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from mpc.dealer import run_dealer
    from mpc.session import DEALER_RANK, SessionConfig, SessionError

    logging.basicConfig(level=logging.INFO, format="%(asctime)s dealer %(message)s")
    if args.sessions < 0:
        print("--sessions must be >= 0", file=sys.stderr)
        return 2
    served = 0
    while args.sessions == 0 or served < args.sessions:
        try:
            config = SessionConfig(
                rank=DEALER_RANK,
                host=args.host,
                port=args.port + served,
                timeout_s=args.timeout,
                precision_bits=args.precision_bits,
                allow_remote=args.allow_remote,
            )
        except SessionError as exc:
            print(f"dealer: {exc}", file=sys.stderr)
            return 2
        try:
            run_dealer(config)
        except KeyboardInterrupt:
            return 130
        except Exception as exc:  # one failed session must not take the dealer down silently
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            print(f"dealer: session on port {config.port} failed: {reason}", file=sys.stderr)
            if args.sessions:
                return 1
        served += 1
    return 0
