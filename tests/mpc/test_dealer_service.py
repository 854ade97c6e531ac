"""The dealer service: concurrent sessions, a party dying mid-session, bounded state,
and who may join (both parties authenticate the dealer, and it them)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from mpc.plane.certificate_authority import issue_cert
from mpc.plane.dealer_client import DealerError, open_dealer_link
from mpc.plane.dealer_ops import request
from mpc.plane.dealer_service import DealerConfig, DealerLimits, DealerService
from mpc.plane.fixed_masks import fixed_mask
from mpc.plane.tls import PeerRefused, client_context

from helpers.plane_helpers import HOST, Pki, both

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return Pki.make(tmp_path_factory.mktemp("pki"))


def _service(pki: Pki, **limits) -> DealerService:
    return DealerService(DealerConfig(HOST, 0, pki.files("dealer"), limits=DealerLimits(**limits))).start()


def _join(service: DealerService, pki: Pki, sid: str, rank: int, name: str | None = None, **kw):
    ctx = client_context(pki.files(name or f"party{rank}", **kw))
    return open_dealer_link(HOST, service.port, ctx, "dealer", sid, rank, 20)


def _join_both(service, pki, sid):
    return both(lambda: _join(service, pki, sid, 0), lambda: _join(service, pki, sid, 1))


def _check_triples(links, n: int, count: int) -> None:
    """party 0 fetches `count` matmul triples; with party 1's local draws they are right."""
    link0, link1 = links
    for _ in range(count):
        op, req = request("matmul", [(n, 3), (3, n)])
        (a0, b0), c0 = op.party_shares(link0.prg, 0, req, lambda r: link0.fetch(r, (n, n)))
        (a1, b1), c1 = op.party_shares(link1.prg, 1, req, lambda r: None)
        assert torch.equal(c0 + c1, (a0 + a1) @ (b0 + b1))


def _wait_until(predicate, timeout_s: float = 20.0) -> None:
    end = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < end, "condition not reached in time"
        time.sleep(0.05)


def test_two_jobs_at_once(pki):
    service = _service(pki)
    try:
        (a, b) = both(lambda: _join_both(service, pki, "jobA.1"), lambda: _join_both(service, pki, "jobB.1"))
        assert service.sessions.snapshot()["running"] == ["jobA.1", "jobB.1"]
        both(lambda: _check_triples(a, 5, 4), lambda: _check_triples(b, 7, 4))
        assert a[0].requests == 4 and a[0].bytes == 4 * 25 * 8
        assert a[1].channel is None  # party 1 only received its key
        for link in (a[0], b[0]):
            link.close()
        _wait_until(lambda: service.sessions.snapshot()["running"] == [])
        assert service.sessions.snapshot()["finished"] == {"jobA.1": "finished", "jobB.1": "finished"}
    finally:
        service.stop()


@pytest.mark.timeout(180)
def test_a_party_dying_mid_session_frees_its_session_only(pki):
    service = _service(pki)
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "dealer_party.py"), str(pki.good), str(service.port), "dies.1"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        survivor = _join_both(service, pki, "lives.1")
        link1 = _join(service, pki, "dies.1", 1)
        assert link1.prg.words == 0
        assert proc.stdout.readline().strip() == "fetched"
        assert service.sessions.snapshot()["running"] == ["dies.1", "lives.1"]
        proc.kill()  # party 0 of "dies.1" dies without a goodbye
        proc.wait(10)
        _wait_until(lambda: service.sessions.snapshot()["running"] == ["lives.1"])
        assert service.sessions.snapshot()["finished"]["dies.1"] == "aborted"
        _check_triples(survivor, 4, 3)  # the other session is untouched
        survivor[0].close()
        _check_triples(_join_both(service, pki, "next.1"), 3, 1)  # and new ones are served
    finally:
        if proc.poll() is None:
            proc.kill()
        service.stop()


def test_session_ids_are_single_use_and_state_is_bounded(pki):
    service = _service(pki, max_sessions=1, remember_sessions=2, join_timeout_s=1.0)
    try:
        links = _join_both(service, pki, "s.1")
        with pytest.raises(DealerError, match="serves 1 sessions already"):
            _join(service, pki, "s.2", 0)
        links[0].close()
        _wait_until(lambda: service.sessions.snapshot()["running"] == [])
        with pytest.raises(DealerError, match="already ran"):
            _join(service, pki, "s.1", 1)
        start = time.monotonic()
        with pytest.raises(DealerError, match="party 1 did not join session s.3"):
            _join(service, pki, "s.3", 0)  # the other party never comes
        assert time.monotonic() - start < 10
        _join_both(service, pki, "s.4")[0].close()
        _wait_until(lambda: service.sessions.snapshot()["running"] == [])
        assert list(service.sessions.snapshot()["finished"]) == ["s.3", "s.4"]  # only the last two are kept
    finally:
        service.stop()


def test_a_session_keeps_one_mask_stack_and_drops_it_when_it_ends(pki):
    """Two `matmul_fixed` requests for the same fixed operands: the dealer rebuilds their
    masks once and keeps one stack (right shares both times); the stack goes with the session."""
    service = _service(pki)
    try:
        links = _join_both(service, pki, "cache.1")
        session = service.sessions.running["cache.1"]
        for _ in range(2):
            op, req = request("matmul_fixed", [(3, 1, 2), (5,), (3, 2, 5)], list(range(6)))
            (a0,), c0 = op.party_shares(links[0].prg, 0, req, lambda r: links[0].fetch(r, (3, 1, 5)))
            (a1,), c1 = op.party_shares(links[1].prg, 1, req, lambda r: None)
            masks = [torch.stack([fixed_mask(link.prg, i, (5,)) for i in range(6)]) for link in links]
            assert torch.equal(c0 + c1, torch.matmul(a0 + a1, (masks[0] + masks[1]).reshape(3, 2, 5)))
        assert (session.fixed_masks.rebuilds, session.fixed_masks.elements) == (1, 30)
        links[0].close()
        _wait_until(lambda: service.sessions.snapshot()["finished"].get("cache.1") == "finished")
        assert session.fixed_masks.elements == 0
    finally:
        service.stop()


def test_oversized_request_is_refused_and_ends_the_session(pki):
    service = _service(pki, max_request_elements=100)
    try:
        link0, _ = _join_both(service, pki, "big.1")
        op, req = request("mul", [(101,), (101,)])
        with pytest.raises(DealerError, match="exceed this dealer's limit of 100"):
            link0.fetch(req, (101,))
        _wait_until(lambda: service.sessions.snapshot()["finished"].get("big.1") == "refused a request")
    finally:
        service.stop()


def test_who_may_join(pki):
    service = _service(pki)
    try:
        with pytest.raises(DealerError, match="'party1' may not join as party 0"):
            _join(service, pki, "who.1", 0, name="party1")
        with pytest.raises((PeerRefused, DealerError), match="refused this process.s certificate|unknown ca"):
            _join(service, pki, "who.2", 0, issuer="rogue")  # a certificate from another CA
        with pytest.raises((PeerRefused, DealerError), match="expired|certificate"):
            _join(service, pki, "who.3", 1, name="party1-expired")
        assert service.sessions.snapshot()["running"] == []
    finally:
        service.stop()


def test_parties_authenticate_the_dealer(pki):
    impostor = DealerService(DealerConfig(HOST, 0, pki.files("party1"))).start()  # a valid cert, wrong identity
    rogue = DealerService(DealerConfig(HOST, 0, pki.files("dealer", ca="rogue", issuer="rogue"))).start()
    try:
        with pytest.raises(PeerRefused, match="names 'party1', but 'dealer' is configured"):
            _join(impostor, pki, "imp.1", 0)
        with pytest.raises(
            PeerRefused,
            match="certificate rejected: (unable to get local issuer|self-signed certificate in certificate chain)",
        ):
            _join(rogue, pki, "imp.2", 0)
    finally:
        impostor.stop()
        rogue.stop()


def test_rotated_dealer_certificate_is_used_without_a_restart(tmp_path):
    pki = Pki.make(tmp_path)
    service = _service(pki)
    try:
        links = _join_both(service, pki, "rot.1")
        old = links[0].info.certificate_sha256
        links[0].close()
        issue_cert(pki.good, "dealer")  # rotation: a new key and certificate, same identity
        links = _join_both(service, pki, "rot.2")
        assert links[0].info.identity == "dealer" and links[0].info.certificate_sha256 != old
        links[0].close()
    finally:
        service.stop()
