"""The dealer: CrypTen's trusted-third-party (TTP) provider as its own process (DESIGN §2).

It rendezvouses as rank WORLD_SIZE (= 2), hands each party a PRNG seed, then serves
correlated randomness (Beaver triples, binary triples, wrap counts, B2A bits) to party 0
until party 0 says goodbye. It never receives data shares. With a session timeout, an
idle dealer gives up after `timeout_s` (no request within that time) and returns.
"""

from __future__ import annotations

import logging

from mpc.onnx_shim import load_crypten
from mpc.session import DEALER_RANK, SessionConfig, _distributed_timeout, configure, force_teardown

log = logging.getLogger(__name__)


def run_dealer(config: SessionConfig) -> None:
    """Serve one session as the dealer; returns when the parties close it (or on timeout)."""
    if not config.is_dealer:
        raise ValueError(f"the dealer must have rank {DEALER_RANK}, got {config.rank}")
    crypten = load_crypten()
    from crypten.mpc.provider.ttp_provider import TTPServer

    configure(config)
    log.info("dealer listening for a session at %s", config.rendezvous)
    try:
        with _distributed_timeout(config.timeout_s):
            TTPServer()
        crypten.uninit()
    except Exception:
        force_teardown()
        raise
    log.info("dealer session at %s finished", config.rendezvous)
