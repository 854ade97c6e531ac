"""The dealer and party0's MPC listener bound unauthenticated connections per source and in
time: silent or slow TCP clients cannot keep a legitimate party out (mpc.plane.pending)."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from mpc.plane.dealer_client import open_dealer_link
from mpc.plane.dealer_service import DealerConfig, DealerLimits, DealerService
from mpc.plane.rendezvous import PeerListener, connect_peer, ping
from mpc.plane.tls import PeerRefused, client_context, server_context

from helpers.plane_helpers import HOST, Pki, both

SILENT = 40  #: more than the 36 connection slots a dealer with 16 sessions kept before


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return Pki.make(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def dealer(pki: Pki) -> Iterator[DealerService]:
    service = DealerService(DealerConfig(HOST, 0, pki.files("dealer"), limits=DealerLimits())).start()
    yield service
    service.stop()


def _silent(port: int, count: int) -> list[socket.socket]:
    """Connections that never start TLS."""
    return [socket.create_connection((HOST, port), timeout=5) for _ in range(count)]


def _session(pki: Pki, port: int, sid: str) -> float:
    """Both parties join session `sid`; returns the seconds it took."""
    start = time.monotonic()
    links = both(
        *(
            lambda r=r: open_dealer_link(HOST, port, client_context(pki.files(f"party{r}")), "dealer", sid, r, 30)
            for r in (0, 1)
        )
    )
    for link in links:
        link.close()
    return time.monotonic() - start


def test_silent_connections_do_not_block_a_party(pki: Pki, dealer: DealerService):
    idle = _silent(dealer.port, SILENT)
    try:
        time.sleep(0.5)  # the dealer has accepted them all
        assert _session(pki, dealer.port, "job-idle.1") < 3.0
        assert dealer.pending.count() <= DealerLimits().max_unauthenticated_per_source
        assert dealer.pending.closed >= SILENT - DealerLimits().max_unauthenticated_per_source
    finally:
        for s in idle:
            s.close()


def test_a_stalled_handshake_is_closed_after_the_bound(pki: Pki):
    limits = DealerLimits(handshake_timeout_s=1.0)
    service = DealerService(DealerConfig(HOST, 0, pki.files("dealer"), limits=limits)).start()
    try:
        stalled = socket.create_connection((HOST, service.port), timeout=10)
        stalled.sendall(b"\x16\x03\x01")  # the first bytes of a TLS record, then nothing
        start = time.monotonic()
        assert stalled.recv(1) == b""  # the dealer closed it
        assert 0.5 < time.monotonic() - start < 4.0
        assert service.pending.count() == 0
        assert _session(pki, service.port, "job-after.1") < 3.0
    finally:
        stalled.close()
        service.stop()


def test_a_party_checks_the_dealer_with_a_tls_hello_it_does_not_log_as_refused(pki: Pki, dealer, caplog):
    caplog.set_level(logging.DEBUG, logger="mpc.plane")
    ping(HOST, dealer.port, client_context(pki.files("party0")), "dealer", 5, "the dealer")
    time.sleep(0.3)  # the dealer's connection thread has ended
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert any("checked the service is up" in r.getMessage() for r in caplog.records)
    with pytest.raises(PeerRefused, match="'dealer'"):  # the dealer's identity is checked too
        ping(HOST, dealer.port, client_context(pki.files("party0")), "another-dealer", 5, "the dealer")


def test_silent_connections_do_not_block_party1_at_the_mpc_listener(pki: Pki):
    listener = PeerListener(HOST, 0, server_context(pki.files("party0")))
    accepted: list = []
    waiting = threading.Thread(target=lambda: accepted.append(listener.accept_peer("job-mpc.1", "party1", 30)))
    waiting.start()
    idle = _silent(listener.port, SILENT)
    try:
        time.sleep(0.5)  # the listener has accepted them all
        start = time.monotonic()
        ch1 = connect_peer(HOST, listener.port, client_context(pki.files("party1")), "party0", "job-mpc.1", 30)
        waiting.join(30)
        assert time.monotonic() - start < 3.0
        ch1.send_json({"hello": 1})
        assert accepted[0].recv_json() == {"hello": 1}
        accepted[0].close()
        ch1.close()
    finally:
        for s in idle:
            s.close()
