"""A party's link to the dealer service for one session (`DealerLink`).

`open_dealer_link` connects to the configured dealer address, checks the dealer's
certificate names the configured dealer identity, joins the session as rank r and
receives this party's 32-byte PRG key (`mpc.plane.prg`). party 1 then closes the
connection (it expands its key locally); party 0 keeps it and `fetch`es its share of
each correlated value (`mpc.plane.dealer_ops`), or `submit`s a request now and `collect`s
the answer later: one thread exchanges the requests in submission order
(`mpc.plane.dealer_worker`). The link counts what it received and how long party 0
waited: the "offline" bytes and seconds of the cost ledger (a request's bytes when its
answer is collected or discarded). It also numbers the session's fixed operands
(`number_fixed`, `mpc.plane.fixed_beaver`): a counter both parties advance in protocol
order, starting at 0 in every session; and it holds the session's prefetched
`matmul_fixed` pairs (`ready` and `ahead`, `mpc.plane.fixed_prefetch`), which end with it.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mpc.plane.channel import Channel, ChannelClosed, ChannelTimeout, RemoteError
from mpc.plane.dealer_ops import Request
from mpc.plane.dealer_worker import Pending, RequestWorker
from mpc.plane.prg import KEY_BYTES, Prg
from mpc.plane.rendezvous import connect, say_hello
from mpc.plane.tls import peer_fingerprint, peer_identity

if TYPE_CHECKING:
    import torch


class DealerError(ConnectionError):
    """The dealer refused the session or a request, or the link to it broke."""


@dataclass(frozen=True)
class DealerInfo:
    """Which dealer served the session: recorded in the job report."""

    address: str
    identity: str
    certificate_sha256: str


@dataclass(frozen=True)
class Prefetched:
    """A `matmul_fixed` pair drawn ahead of its use: the request, a_p and [C]_p (party 0: pending)."""

    request: Request
    local: torch.Tensor
    share: Pending | torch.Tensor


class DealerLink:
    def __init__(self, rank: int, key: bytes, channel: Channel | None, info: DealerInfo) -> None:
        self.rank = rank
        self.prg = Prg(key)
        self.channel = channel
        self.info = info
        self.bytes = 0  #: payload bytes of the shares received from the dealer
        self.seconds = 0.0  #: time spent waiting for them
        self.requests = 0
        self.fixed_operands = 0  #: fixed operands numbered so far in this session
        self.ready: list[Prefetched] = []  #: pairs drawn last round for this round's fixed products, in call order
        self.ahead: list[Prefetched] = []  #: pairs drawn this round for the next round's, in call order
        #: draw the next round's pair after each fixed product: only inside a caller's
        #: `Primitives.fixed_repeats(True)`, which knows the products come again
        self.prefetch = False
        self._worker = None if channel is None else RequestWorker(self._exchange, f"dealer-link-{info.address}")

    def number_fixed(self, count: int) -> list[int]:
        """The next `count` fixed-operand numbers of this session (both parties, protocol order)."""
        start = self.fixed_operands
        self.fixed_operands += count
        return list(range(start, start + count))

    def fetch(self, request: Request, shape: tuple[int, ...]) -> torch.Tensor:
        """party 0: the dealer's share V_0 for `request` (an int64 tensor of `shape`)."""
        return self.collect(self.submit(request, shape))

    def submit(self, request: Request, shape: tuple[int, ...]) -> Pending:
        """party 0: send `request` in its place in the session's order; the answer comes later."""
        if self._worker is None:
            raise DealerError("only party 0 requests correlated randomness from the dealer")
        self.requests += 1
        return self._worker.submit(request, shape)

    def collect(self, pending: Pending) -> torch.Tensor:
        """party 0: wait for a submitted request's answer (counted as offline time and bytes)."""
        start = time.perf_counter()
        try:
            share = pending.result()
        finally:
            self.seconds += time.perf_counter() - start
        self.bytes += share.numel() * share.element_size()
        return share

    def discard(self, pending: Pending) -> None:
        """party 0: an answer that will not be used; its bytes were sent all the same."""
        self.bytes += 8 * math.prod(pending.shape)

    def _exchange(self, request: Request, shape: tuple[int, ...]) -> torch.Tensor:
        """The worker thread: send one request, receive its answer."""
        import torch

        assert self.channel is not None
        try:
            self.channel.send_json(request.to_json())
            return self.channel.recv_into(torch.empty(shape, dtype=torch.long))
        except (ChannelClosed, ChannelTimeout, ConnectionError) as exc:
            raise DealerError(f"dealer {self.info.identity or self.info.address}: {exc}") from None
        except RemoteError as exc:  # the dealer refused the request
            raise DealerError(str(exc)) from None

    def close(self, graceful: bool = True) -> None:
        """party 0: finish the submitted requests, say goodbye (the dealer then drops the session) and close."""
        self.ready, self.ahead = [], []
        if self.channel is None or self._worker is None:
            return
        try:
            if not graceful:
                self.channel.close()  # a worker blocked on the dealer returns at once
            self._worker.stop(self.channel.timeout_s)
            if graceful:
                self.channel.send_json({"bye": True})
                self.channel.recv_json()
        except (ConnectionError, TimeoutError, RemoteError):
            pass  # the session ends on the dealer's side either way
        finally:
            self.channel.close()
            self.channel = None
            self._worker = None


def open_dealer_link(
    host: str, port: int, ctx, expect: str, session_id: str, rank: int, timeout_s: float
) -> DealerLink:
    """Join `session_id` at the dealer as `rank`; returns once the dealer sent our key."""
    address = f"{host}:{port}"
    sock = connect(host, port, ctx, expect, time.monotonic() + timeout_s, f"dealer {expect or '(no TLS)'}")
    info = DealerInfo(
        address,
        peer_identity(sock) if ctx is not None else "",
        peer_fingerprint(sock) if ctx is not None else "",
    )
    try:
        answer = say_hello(sock, timeout_s, f"the dealer at {address}", {"session": session_id, "rank": rank})
    except (ConnectionError, TimeoutError) as exc:
        raise DealerError(f"session {session_id}: {exc}") from None
    try:
        key = bytes.fromhex(str(answer.get("key", "")))
    except ValueError:
        key = b""
    if len(key) != KEY_BYTES:
        sock.close()
        raise DealerError(f"dealer at {address} sent no valid session key")
    channel = Channel(sock, timeout_s, f"the dealer at {address}")
    if rank == 1:
        channel.close()
        return DealerLink(rank, key, None, info)
    return DealerLink(rank, key, channel, info)
