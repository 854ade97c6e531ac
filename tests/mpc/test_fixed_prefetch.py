"""Prefetched `matmul_fixed` pairs against a real dealer service: the order invariant.

Both parties run the same sequence of rounds, each of a few products (the same fixed rows
again, other rows, a changed shape) interleaved with ordinary Beaver triples, each round
said to come again or not; party 0's requests go to the dealer (`DealerService` on
loopback, TLS), party 1 draws locally. Every share must reconstruct its value, party 0
must have made exactly the requests and received exactly the bytes the rounds call for
(a round repeated with its products in the same order, several of them, draws nothing
more), and at the end the dealer and both parties must have drawn the same number of
words from each stream: a prefetch out of place would break both.
"""

from __future__ import annotations

import itertools
import time

import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from mpc.plane.dealer_client import DealerLink, open_dealer_link
from mpc.plane.dealer_ops import request
from mpc.plane.dealer_service import DealerConfig, DealerService
from mpc.plane.fixed_masks import fixed_mask
from mpc.plane.fixed_prefetch import fixed_matmul_pair, next_round
from mpc.plane.tls import client_context

from helpers.plane_helpers import HOST, Pki, both

#: the products a round may make: (a, operand, view) and the fixed ids
PRODUCTS = {
    "rows A": ([(3, 1, 2), (5,), (3, 2, 5)], list(range(6))),
    "rows B": ([(3, 1, 2), (5,), (3, 2, 5)], list(range(6, 12))),
    "rows A, one each": ([(6, 1, 1), (5,), (6, 1, 5)], list(range(6))),
}
_sessions = itertools.count()


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    pki = Pki.make(tmp_path_factory.mktemp("pki"))
    dealer = DealerService(DealerConfig(HOST, 0, pki.files("dealer"))).start()
    dealer.pki = pki  # type: ignore[attr-defined]
    yield dealer
    dealer.stop()


def _links(service: DealerService, sid: str) -> tuple[DealerLink, DealerLink]:
    pki = service.pki  # type: ignore[attr-defined]

    def join(rank: int) -> DealerLink:
        ctx = client_context(pki.files(f"party{rank}"))
        return open_dealer_link(HOST, service.port, ctx, "dealer", sid, rank, 20)

    return both(lambda: join(0), lambda: join(1))


def _product(links: tuple[DealerLink, DealerLink], name: str) -> int:
    """Both parties' pair for one product; checks C = A·B; returns party 0's answer bytes."""
    shapes, ids = PRODUCTS[name]
    op, req = request("matmul_fixed", shapes, ids)
    (a0, c0), (a1, c1) = (fixed_matmul_pair(link, op, req) for link in links)
    masks = [torch.stack([fixed_mask(link.prg, i, shapes[1]) for i in ids]) for link in links]
    assert torch.equal(c0 + c1, torch.matmul(a0 + a1, (masks[0] + masks[1]).reshape(shapes[2])))
    return c0.numel() * 8


def _triple(links: tuple[DealerLink, DealerLink]) -> int:
    op, req = request("matmul", [(2, 3), (3, 2)])
    (a0, b0), c0 = op.party_shares(links[0].prg, 0, req, lambda r: links[0].fetch(r, (2, 2)))
    (a1, b1), c1 = op.party_shares(links[1].prg, 1, req, lambda r: pytest.fail("party 1 never asks"))
    assert torch.equal(c0 + c1, (a0 + a1) @ (b0 + b1))
    return c0.numel() * 8


def _size(name: str) -> int:
    """Bytes of party 0's share of C for one product."""
    (n, rows, _), (m,), _ = PRODUCTS[name][0]
    return 8 * n * rows * m


ROUND = st.lists(st.sampled_from([*PRODUCTS, "triple"]), min_size=1, max_size=3)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rounds=st.lists(st.tuples(ROUND, st.booleans()), min_size=1, max_size=5))  # (products, they come again)
@example(rounds=[(["rows A", "rows B"], True), (["rows A", "rows B"], True), (["rows A", "rows B"], False)])
def test_prefetched_pairs_keep_both_parties_in_step_with_the_dealer(service, rounds):
    sid = f"prefetch.{next(_sessions)}"
    links = _links(service, sid)
    session = service.sessions.running[sid]
    ready: list[str] = []  # the pairs drawn last round for this one, in call order
    ahead: list[str] = []  # the pairs drawn this round for the next
    expected_bytes = expected_requests = 0
    for products, again in rounds:
        for link in links:
            next_round(link)
            link.prefetch = again
        expected_bytes += sum(_size(name) for name in ready)  # left over: dropped, their bytes were sent
        ready, ahead = ahead, []
        for step in products:
            if step == "triple":
                expected_bytes += _triple(links)
                expected_requests += 1
                continue
            expected_bytes += _product(links, step)
            if ready and ready[0] == step:
                ready.pop(0)  # served by the pair drawn in the round before: no request now
            else:
                expected_bytes += sum(_size(name) for name in ready)  # dropped
                expected_requests += 1
                ready = []
            if again:  # the next round's pair, submitted at once; none when the caller says it will not come
                ahead.append(step)
                expected_requests += 1
    assert [(len(link.ready), len(link.ahead)) for link in links] == [(len(ready), len(ahead))] * 2
    assert (links[0].bytes, links[0].requests) == (expected_bytes, expected_requests)
    links[0].close()
    links[1].close()
    _wait_until(lambda: service.sessions.snapshot()["finished"].get(sid) == "finished")
    # the dealer drew every request's material from both streams exactly where the parties did
    assert [prg.words for prg in session.prgs] == [link.prg.words for link in links]
    assert links[0].ready == links[0].ahead == [] and session.fixed_masks.elements == 0


def _wait_until(predicate, timeout_s: float = 20.0) -> None:
    end = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < end, "condition not reached in time"
        time.sleep(0.02)
