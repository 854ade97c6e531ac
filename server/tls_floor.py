"""TLS 1.3 as the minimum on every gRPC listener of a party (client/admin and peer ports).

gRPC's Python API has no minimum-version option for server credentials. Its TLS 1.2 cipher
suites come from the environment variable GRPC_SSL_CIPHER_SUITES, read once when gRPC is
loaded; its TLS 1.3 suites are fixed. The listeners are given a single TLS 1.2 suite,
TLS12_SUITES, a pre-shared-key suite that needs a PSK callback gRPC never installs: no
TLS 1.2 handshake can agree on a suite, a client that offers only TLS 1.2 is refused (no
shared cipher), and every connection that succeeds is TLS 1.3.

The variable must be set before anything loads gRPC: the party entry points call
`require_tls13()` first, and `PartyServer` refuses to start when it was not
(`check_tls13`), so no party can serve TLS 1.2 by an import-order accident. This module
imports nothing of gRPC.
"""

from __future__ import annotations

import os
import sys

TLS12_SUITES = "PSK-AES128-CBC-SHA"
ENV = "GRPC_SSL_CIPHER_SUITES"
_state = {"set_before_grpc": False}


def require_tls13() -> None:
    """Set the TLS 1.2 suite list of this process (call before gRPC is imported)."""
    os.environ[ENV] = TLS12_SUITES
    _state["set_before_grpc"] = "grpc" not in sys.modules


def check_tls13() -> None:
    """Raise OSError unless this process's gRPC listeners accept TLS 1.3 only."""
    if not _state["set_before_grpc"] or os.environ.get(ENV) != TLS12_SUITES:
        raise OSError(
            "the TLS 1.3 floor of the gRPC ports was not set before gRPC was loaded: start the party "
            "with `starfish party` or `python -m party0|party1` (server.tls_floor)"
        )
