"""party0 ↔ party1 authentication on the MPC plane: a certificate from another CA, an
expired one, one naming another identity, or another session is refused with a clear
error — and a refused stranger does not stop party 0 from accepting the real party 1."""

from __future__ import annotations

import logging
import threading

import pytest

from mpc.plane.rendezvous import PeerListener, connect_peer
from mpc.plane.tls import PeerRefused, client_context, server_context

from helpers.plane_helpers import HOST, Pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return Pki.make(tmp_path_factory.mktemp("pki"))


class Party0:
    """party 0 accepting one session in a thread."""

    def __init__(self, files, session: str = "id.1", timeout_s: float = 20.0) -> None:
        self.listener = PeerListener(HOST, 0, server_context(files))
        self.result: dict[str, object] = {}
        self.thread = threading.Thread(target=self._run, args=(session, timeout_s), daemon=True)
        self.thread.start()

    def _run(self, session: str, timeout_s: float) -> None:
        try:
            self.result["channel"] = self.listener.accept_peer(session, "party1", timeout_s)
        except Exception as exc:  # inspected by the test
            self.result["error"] = exc

    def join(self):
        self.thread.join(30)
        return self.result


def _connect(port: int, files, session: str = "id.1", expect: str = "party0"):
    return connect_peer(HOST, port, client_context(files), expect, session, 5.0)


def test_strangers_are_refused_then_the_real_peer_gets_in(pki, caplog):
    caplog.set_level(logging.WARNING, logger="mpc.plane.rendezvous")
    p0 = Party0(pki.files("party0"))
    port = p0.listener.port
    with pytest.raises(PeerRefused, match="refused this process.s certificate|unknown ca"):
        _connect(port, pki.files("party1", issuer="rogue"))  # signed by another CA
    with pytest.raises(PeerRefused, match="refused this process.s certificate|expired"):
        _connect(port, pki.files("party1-expired"))
    with pytest.raises(PeerRefused, match="accepts only 'party1'; the certificate names 'dealer'"):
        _connect(port, pki.files("dealer"))  # valid, but another identity
    with pytest.raises(PeerRefused, match="serves session id.1 to party 1 only"):
        _connect(port, pki.files("party1"), session="other.1")
    channel = _connect(port, pki.files("party1"))
    got = p0.join()
    assert "channel" in got, got
    log = caplog.text
    assert "unable to get local issuer certificate" in log
    assert "certificate has expired" in log
    assert "the certificate names 'dealer'" in log
    channel.close()
    got["channel"].close()


def test_party1_refuses_a_wrong_party0(pki):
    impostor = Party0(pki.files("dealer"), timeout_s=3.0)  # valid certificate, wrong identity
    with pytest.raises(PeerRefused, match="names 'dealer', but 'party0' is configured"):
        _connect(impostor.listener.port, pki.files("party1"))
    rogue = Party0(pki.files("party0", ca="rogue", issuer="rogue"), timeout_s=3.0)
    with pytest.raises(PeerRefused, match="certificate rejected"):
        _connect(rogue.listener.port, pki.files("party1"))
    assert "error" in impostor.join() and "error" in rogue.join()  # both gave up after their timeout


def test_nobody_comes(pki):
    p0 = Party0(pki.files("party0"), timeout_s=1.0)
    err = p0.join()["error"]
    assert "did not join session id.1" in str(err)
