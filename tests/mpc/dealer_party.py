"""A party 0 in a process of its own, for the dealer test that kills it mid-session."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from mpc.plane.dealer_client import open_dealer_link
from mpc.plane.dealer_ops import request
from mpc.plane.tls import TlsFiles, client_context


def main(certs: str, port: int, session_id: str) -> None:
    d = Path(certs)
    ctx = client_context(TlsFiles(d / "ca.pem", d / "party0.pem", d / "party0.key"))
    link = open_dealer_link("127.0.0.1", port, ctx, "dealer", session_id, 0, 30)
    op, req = request("mul", [(8,), (8,)])
    link.fetch(req, (8,))
    print("fetched", flush=True)
    time.sleep(600)  # killed here, mid-session


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
