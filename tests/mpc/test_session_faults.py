"""Session safety: TFP refused, plaintext refused off loopback, lock-step detection, dead/hung peers."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest
import torch

from mpc.cluster import ClusterConfig, TwoPartyError, run_two_party
from mpc.crypten_backend import CrypTenBackend
from mpc.plane import communicator
from mpc.plane.channel import Channel
from mpc.plane.communicator import PlaneCommunicator
from mpc.plane.tls import TlsFiles
from mpc.session import Endpoint, InsecureProviderError, SessionConfig, SessionError, configure

from helpers import twoparty_cases as cases

SHORT_TIMEOUT_S = 5.0


def _config(**overrides) -> SessionConfig:
    args = {
        "rank": 0,
        "session_id": "j1.1",
        "peer": Endpoint("127.0.0.1", 0),
        "dealer": Endpoint("127.0.0.1", 29500),
        "tls": TlsFiles(Path("ca.pem"), Path("p.pem"), Path("p.key")),
    }
    return SessionConfig(**(args | overrides))


def test_dealer_provider_replaces_crypten_ttp_and_tfp_is_refused():
    from mpc.crypten_loader import load_crypten
    from mpc.plane.provider import DealerProvider

    crypten = load_crypten()
    configure(_config())
    assert crypten.cfg.mpc.provider == "TTP"
    assert isinstance(crypten.mpc.get_default_provider(), DealerProvider)
    a, b = socket.socketpair()
    communicator.install(PlaneCommunicator(0, Channel(a, 5.0, "peer")))
    try:
        with crypten.cfg.temp_override({"mpc.provider": "TFP"}):
            with pytest.raises(InsecureProviderError, match="TTP"):
                CrypTenBackend()
    finally:
        PlaneCommunicator.shutdown()
        communicator.install(None)
        b.close()


def test_plaintext_transports_are_loopback_only():
    for transport in ("tcp", "gloo"):
        with pytest.raises(SessionError, match="loopback"):
            _config(transport=transport, tls=None, peer=Endpoint("10.1.2.3", 29500))
        with pytest.raises(SessionError, match="loopback"):
            _config(transport=transport, tls=None, peer=Endpoint("127.0.0.1", 29500), dealer=Endpoint("10.0.0.9", 1))
    # the TLS plane goes anywhere
    assert _config(peer=Endpoint("10.1.2.3", 29500)).peer.host == "10.1.2.3"


@pytest.mark.parametrize(
    "bad",
    [
        {"rank": 2},
        {"timeout_s": 0.0},
        {"transport": "HE"},
        {"tls": None},
        {"session_id": "../etc"},
        {"session_id": ""},
        {"transport": "gloo", "tls": None},
    ],
)
def test_bad_session_config_rejected(bad):
    with pytest.raises(SessionError):
        _config(**bad)


def test_bad_endpoint_rejected():
    with pytest.raises(SessionError):
        Endpoint("127.0.0.1", 70000)


def test_parties_out_of_step_raise_on_both_sides(cluster):
    r0, r1 = cluster.run(cases.out_of_step, torch.ones(4, dtype=torch.float64))
    assert r0.startswith("OutOfStepError") and r1.startswith("OutOfStepError")
    assert "out of step" in r0


def test_different_step_names_detected(cluster):
    r0, r1 = cluster.run(cases.step_mismatch)
    assert r0.startswith("OutOfStepError") and r1.startswith("OutOfStepError")


def test_cluster_still_usable_after_detected_mismatch(cluster):
    cluster.run(cases.out_of_step, torch.ones(2, dtype=torch.float64))
    got, _ = cluster.run(cases.maximum, torch.tensor([[1.0, 3.0], [2.0, -1.0]], dtype=torch.float64), 0)
    assert got.tolist() == [2.0, 3.0]


@pytest.mark.timeout(120)
def test_hung_peer_raises_within_timeout():
    config = ClusterConfig(session_timeout_s=SHORT_TIMEOUT_S)
    with pytest.raises(TwoPartyError) as info:
        run_two_party(cases.hang_then_reveal, (20 * SHORT_TIMEOUT_S,), timeout=90, config=config)
    assert 0 in info.value.errors, info.value
    waited = _waited_seconds(info.value.errors[0])
    # party 0 gave up after the configured timeout (not gloo's 30 minutes, not the 100 s hang)
    assert SHORT_TIMEOUT_S - 0.5 <= waited <= SHORT_TIMEOUT_S + 3.0, info.value.errors[0]


@pytest.mark.timeout(120)
def test_dead_peer_raises_promptly():
    config = ClusterConfig(session_timeout_s=60.0)
    with pytest.raises(TwoPartyError) as info:
        run_two_party(cases.die_then_mul, (), timeout=90, config=config)
    assert 0 in info.value.errors and 1 in info.value.errors
    assert "exited with code 3" in info.value.errors[1]
    assert _waited_seconds(info.value.errors[0]) < 2.0  # "connection closed", not the 60 s timeout


def _waited_seconds(traceback_text: str) -> float:
    match = re.search(r"peer wait failed after ([0-9.]+) s", traceback_text)
    assert match, traceback_text
    return float(match.group(1))


@pytest.mark.timeout(240)
def test_sessions_reinitialise_in_the_same_processes(tmp_path):
    import multiprocessing as mp

    from mpc.plane.certificate_authority import make_certs
    from mpc.plane.dealer_service import DealerConfig, DealerService

    make_certs(tmp_path)
    dealer = DealerService(
        DealerConfig("127.0.0.1", 0, TlsFiles(tmp_path / "ca.pem", tmp_path / "dealer.pem", tmp_path / "dealer.key"))
    ).start()
    ctx = mp.get_context("spawn")
    out, ports = ctx.Queue(), ctx.Queue()
    ids = ["reinit.1", "reinit.2"]
    procs = [
        ctx.Process(target=cases.reinit_party, args=(r, str(tmp_path), dealer.port, ids, ports, out)) for r in (0, 1)
    ]
    for p in procs:
        p.start()
    try:
        got = dict(out.get(timeout=200) for _ in range(2))
        for p in procs:
            p.join(60)
        assert got[0] == got[1] == [[2.25, 4.0], [2.25, 4.0]]
        assert all(p.exitcode == 0 for p in procs)
        assert dealer.sessions.snapshot() == {"running": [], "finished": dict.fromkeys(ids, "finished")}
    finally:
        dealer.stop()
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
