"""`PlaneCommunicator` over a real TLS connection: every collective against its definition.

Party 0 and party 1 run in two threads of this process, connected through
`PeerListener` / `connect_peer` on loopback with the test CA's certificates. Hypothesis
draws int64 tensors over the whole ring (sums wrap mod 2^64) and random shapes.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from torch.distributed import ReduceOp

from mpc.crypten_loader import load_crypten
from mpc.plane.channel import ChannelClosed
from mpc.plane.communicator import PlaneCommunicator

from helpers.plane_helpers import Pki, both, pair

crypten = load_crypten()
SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def comms(tmp_path_factory):
    crypten.cfg.communicator.verbose = True
    pki = Pki.make(tmp_path_factory.mktemp("pki"))
    ch0, ch1 = pair(pki.files("party0"), pki.files("party1"))
    pair_ = (PlaneCommunicator(0, ch0), PlaneCommunicator(1, ch1))
    yield pair_
    for c in pair_:
        c.channel.close()


shapes = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=6)
ring = st.integers(-(2**63), 2**63 - 1)


@st.composite
def two_tensors(draw):
    shape = draw(shapes)
    arrays = [draw(hnp.arrays(np.int64, shape, elements=ring)) for _ in range(2)]
    return [torch.from_numpy(a.copy()) for a in arrays]


@SETTINGS
@given(xs=two_tensors(), op=st.sampled_from(["sum", "xor"]))
def test_all_reduce(comms, xs, op):
    red = ReduceOp.SUM if op == "sum" else ReduceOp.BXOR
    want = xs[0] + xs[1] if op == "sum" else xs[0] ^ xs[1]
    r0, r1 = both(lambda: comms[0].all_reduce(xs[0], op=red), lambda: comms[1].all_reduce(xs[1], op=red))
    assert torch.equal(r0, want) and torch.equal(r1, want)


@SETTINGS
@given(xs=two_tensors(), ys=two_tensors())
def test_batched_all_reduce_and_reduce(comms, xs, ys):
    r0, r1 = both(
        lambda: comms[0].all_reduce([xs[0], ys[0]], batched=True),
        lambda: comms[1].all_reduce([xs[1], ys[1]], batched=True),
    )
    for r in (r0, r1):
        assert torch.equal(r[0], xs[0] + xs[1]) and torch.equal(r[1], ys[0] + ys[1])
    r0, r1 = both(lambda: comms[0].reduce(xs[0], 1), lambda: comms[1].reduce(xs[1], 1))
    assert r0 is None and torch.equal(r1, xs[0] + xs[1])


@SETTINGS
@given(xs=two_tensors(), src=st.integers(0, 1))
def test_point_to_point_gather_broadcast(comms, xs, src):
    dst = 1 - src
    sent, got = both(
        lambda: comms[src].send(xs[src], dst),
        lambda: comms[dst].recv(torch.empty_like(xs[src]), src),
    )
    assert torch.equal(got, xs[src])
    g0, g1 = both(lambda: comms[0].all_gather(xs[0]), lambda: comms[1].all_gather(xs[1]))
    for g in (g0, g1):
        assert torch.equal(g[0], xs[0]) and torch.equal(g[1], xs[1])
    g0, g1 = both(lambda: comms[0].gather(xs[0], dst), lambda: comms[1].gather(xs[1], dst))
    assert [g0, g1][src] == [None]
    assert torch.equal([g0, g1][dst][0], xs[0]) and torch.equal([g0, g1][dst][1], xs[1])
    buf = [xs[0].clone(), xs[1].clone()]
    both(lambda: comms[0].broadcast(buf[0], src), lambda: comms[1].broadcast(buf[1], src))
    assert torch.equal(buf[0], xs[src]) and torch.equal(buf[1], xs[src])


@SETTINGS
@given(xs=two_tensors(), src=st.integers(0, 1))
def test_scatter_isend_irecv_barrier(comms, xs, src):
    parts = [xs[0], xs[1]]
    out = both(
        lambda: comms[0].scatter(parts if src == 0 else [torch.empty_like(x) for x in parts], src),
        lambda: comms[1].scatter(parts if src == 1 else [torch.empty_like(x) for x in parts], src),
    )
    assert torch.equal(out[0], xs[0]) and torch.equal(out[1], xs[1])
    into = [torch.empty_like(xs[1]), torch.empty_like(xs[0])]

    def swap(rank: int) -> None:
        req_send = comms[rank].isend(xs[rank], 1 - rank)
        req_recv = comms[rank].irecv(into[rank], 1 - rank)
        req_send.wait()
        req_recv.wait()
        comms[rank].barrier()

    both(lambda: swap(0), lambda: swap(1))
    assert torch.equal(into[0], xs[1]) and torch.equal(into[1], xs[0])


@settings(SETTINGS, max_examples=15)
@given(
    obj=st.recursive(
        st.none() | st.booleans() | st.integers(-(2**60), 2**60) | st.text(max_size=8),
        lambda inner: st.lists(inner, max_size=3) | st.tuples(inner, inner),
        max_leaves=8,
    ),
    src=st.integers(0, 1),
)
def test_small_objects_travel_as_json(comms, obj, src):
    got = both(
        lambda: comms[0].broadcast_obj(obj if src == 0 else None, src),
        lambda: comms[1].broadcast_obj(obj if src == 1 else None, src),
    )
    assert got[0] == obj and got[1] == obj
    size = torch.Size([3, 0, 2])
    got = both(lambda: comms[0].send_obj(size, 1), lambda: comms[1].recv_obj(0))
    assert got[1] == size and isinstance(got[1], torch.Size)


def test_objects_that_need_pickle_are_refused(comms):
    with pytest.raises(TypeError, match="no pickling"):
        comms[0].send_obj({"a": object()}, 1)


def test_large_exchange_and_counters_match_crypten_accounting(comms):
    n = 3_000_000  # 24 MB each way: many TLS records, overlapping send and receive
    xs = [torch.randint(-(2**62), 2**62, (n,)) for _ in range(2)]
    before = [(c.comm_bytes, c.comm_rounds) for c in comms]
    r0, r1 = both(lambda: comms[0].all_reduce(xs[0]), lambda: comms[1].all_reduce(xs[1]))
    assert torch.equal(r0, xs[0] + xs[1]) and torch.equal(r1, r0)
    for c, (b, r) in zip(comms, before, strict=True):
        assert c.comm_bytes - b == 2 * n * 8  # CrypTen counts what a party sends plus receives
        assert c.comm_rounds - r == 1


def test_out_of_step_sizes_are_detected(tmp_path):
    pki = Pki.make(tmp_path)
    ch0, ch1 = pair(pki.files("party0"), pki.files("party1"))
    c0, c1 = PlaneCommunicator(0, ch0), PlaneCommunicator(1, ch1)
    try:
        with pytest.raises(ChannelClosed, match="out of step"):
            both(
                lambda: c0.send(torch.zeros(5, dtype=torch.long), 1),
                lambda: c1.recv(torch.zeros(4, dtype=torch.long), 0),
            )
    finally:
        ch0.close()
        ch1.close()


def test_peer_closing_is_seen_at_once(tmp_path):
    pki = Pki.make(tmp_path)
    ch0, ch1 = pair(pki.files("party0"), pki.files("party1"), timeout_s=30.0)
    c0 = PlaneCommunicator(0, ch0)
    ch1.close()
    with pytest.raises(ChannelClosed, match="closed the connection|lost"):
        c0.all_reduce(torch.zeros(3, dtype=torch.long))
    ch0.close()
