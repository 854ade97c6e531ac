"""TLS 1.3 as the minimum on every gRPC listener of a party (client/admin and peer ports).

gRPC's Python API has no minimum-version option for server credentials. Its TLS 1.2 cipher
suites come from the environment variable GRPC_SSL_CIPHER_SUITES, read once when gRPC is
loaded; its TLS 1.3 suites are fixed. The listeners are given a single TLS 1.2 suite,
TLS12_SUITES, a pre-shared-key suite that needs a PSK callback gRPC never installs: no
TLS 1.2 handshake can agree on a suite, a client that offers only TLS 1.2 is refused (no
shared cipher), and every connection that succeeds is TLS 1.3.

The variable must be set before anything loads gRPC: every entry point (`starfish_cli.entry`
for `starfish party|dealer|...`, `python -m party0|party1`) calls `require_tls13()` first,
and `PartyServer` and the dealer's gRPC port refuse to start when it was not
(`check_tls13`), so no listener can serve TLS 1.2 by an import-order accident. A later
call (the `starfish party` path calls it in `starfish_cli.entry` and again in
`server.main.run_party`, after the command table has loaded gRPC) keeps the floor that an
earlier call set in time. This module imports nothing of gRPC.
"""

from __future__ import annotations

import os
import sys

TLS12_SUITES = "PSK-AES128-CBC-SHA"
ENV = "GRPC_SSL_CIPHER_SUITES"
_state = {"set_before_grpc": False}


def require_tls13() -> None:
    """Set the TLS 1.2 suite list of this process (call before gRPC is imported); once set in
    time, a repeated call after gRPC has loaded keeps it."""
    in_time = _state["set_before_grpc"] and os.environ.get(ENV) == TLS12_SUITES
    os.environ[ENV] = TLS12_SUITES
    _state["set_before_grpc"] = in_time or "grpc" not in sys.modules


def check_tls13() -> None:
    """Raise OSError unless this process's gRPC listeners accept TLS 1.3 only."""
    if not _state["set_before_grpc"] or os.environ.get(ENV) != TLS12_SUITES:
        raise OSError(
            "the TLS 1.3 floor of the gRPC ports was not set before gRPC was loaded: start the service "
            "with `starfish party|dealer` or `python -m party0|party1` (server.tls_floor)"
        )
