"""Listeners of the MPC plane bind only the configured address: `ss` shows the exact
address (never 0.0.0.0, * or [::]) and a connection to another local address is refused."""

from __future__ import annotations

import re
import socket
import subprocess

import pytest

from mpc.cluster import ClusterConfig, TwoPartyCluster
from mpc.plane.dealer_service import DealerConfig, DealerService
from mpc.plane.rendezvous import PeerListener
from mpc.plane.tls import server_context

from helpers.plane_helpers import HOST, Pki

OTHER = "127.0.0.2"  #: another address of this host (all of 127/8 is local), not configured


def _listening(port: int) -> list[str]:
    out = subprocess.run(["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True, check=True).stdout
    return [line.split()[3] for line in out.splitlines() if line.strip()]


def _connects(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=2).close()
        return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return Pki.make(tmp_path_factory.mktemp("pki"))


def test_party0_listener_binds_the_configured_address_only(pki):
    listener = PeerListener(HOST, 0, server_context(pki.files("party0")))
    try:
        assert _listening(listener.port) == [f"{HOST}:{listener.port}"]
        assert not _connects(OTHER, listener.port)
        assert _connects(HOST, listener.port)
    finally:
        listener.close()


def test_dealer_binds_the_configured_address_only(pki):
    service = DealerService(DealerConfig(HOST, 0, pki.files("dealer"))).start()
    try:
        assert _listening(service.port) == [f"{HOST}:{service.port}"]
        assert not _connects(OTHER, service.port)
        assert _connects(HOST, service.port)
    finally:
        service.stop()


@pytest.mark.timeout(300)
def test_a_running_session_has_no_wildcard_listener():
    with TwoPartyCluster(timeout=120, config=ClusterConfig(session_timeout_s=60)) as cluster:
        out = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True, check=True).stdout
        mine = {name: [] for name in cluster.pids}
        for line in out.splitlines():
            for name, pid in cluster.pids.items():
                if re.search(rf"pid={pid},", line):
                    mine[name].append(line.split()[3])
    assert mine["dealer"] and all(a.startswith(f"{HOST}:") for a in mine["dealer"]), mine
    assert mine["party0"] == [] and mine["party1"] == [], mine  # party 0's listener closed once party 1 was in
