"""The `matmul_fixed` pairs of the next round, drawn and requested while this round goes on.

An update-estimation round makes the same fixed-operand products as the round before it
while the clients' buffers stay the same (`lbfgs.expand`: one product per group of
clients, the same fixed rows, the same shapes). So after each product both parties draw
the pair (A, [C = A·B]) for the same request once more and keep it on the session's link:
party 0 submits that request to the dealer at once and does not wait
(`mpc.plane.dealer_worker`), so the dealer computes and sends C's share while the parties
finish this round and start the next; the next round's product finds its pair ready.

Rounds. The caller marks each of its rounds (`Primitives.fixed_repeats`, one block per
round, not nested); `next_round` runs at the start of each. The link holds two lists in
call order: `ahead`, the pairs drawn in this round for the next, and `ready`, the pairs
drawn in the last round for this one. A round's products may be several (one per group
of batch entries, `mpc.plane.request_blocks`): the pairs drawn ahead by its first product
are not offered to its second, only to the next round's first.

Order invariant. The dealer's streams are positional: the dealer and both parties must
draw every request's material in the same sequence. `next_round` and `fixed_matmul_pair`
are called by both parties at the same protocol steps with the same requests (the
backend's `_sync` checks the request) and do, on both, exactly:

0. at a round's start: drop what is left of `ready` (drawn for products that did not
   come), then `ready` ← `ahead`, `ahead` ← [];
1. at a product: if the first pair of `ready` was drawn for this request, take it;
   otherwise drop all of `ready` (its draws stay spent on both sides alike, party 0
   counts its bytes) and draw this product's pair now;
2. if the caller said the round's products come again (`link.prefetch` True, set by
   `Primitives.fixed_repeats(True)` on both parties at the same protocol step; False
   otherwise), draw the next round's pair for this request (party 0: submit it) and append
   it to `ahead`.

Each step depends only on the requests and on what was held, which both parties hold
alike, so both draw the same pairs in the same order, and party 0 submits its requests
in that order. A held pair is used at most once (taken off the list) and is fresh
randomness like any other, so using it a round later reveals nothing more. Cost bound:
the pairs held between rounds are one round's products (n·m ring elements per party at
most); a round that changes the products (pairs entered, other clients) wastes the held
ones (their offline bytes are counted), so nothing is drawn ahead unless the caller knows
the next round makes the same products (Starfish: an estimate round that is not a check
round, whose corrections add pairs, nor the last, and whose successor replays the same
clients); the session's end drops what is held.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mpc.plane.dealer_client import DealerLink, Prefetched
from mpc.plane.dealer_ops import DealerOp, Request
from mpc.plane.dealer_worker import Pending

if TYPE_CHECKING:
    import torch


def next_round(link: DealerLink) -> None:
    """Step 0 of the module doc: the pairs drawn ahead in the last round become this round's."""
    _drop(link, link.ready)
    link.ready, link.ahead = link.ahead, []


def fixed_matmul_pair(link: DealerLink, op: DealerOp, request: Request) -> tuple[torch.Tensor, torch.Tensor]:
    """(a_p, [a @ B]_p) for a `matmul_fixed` request: steps 1 and 2 of the module doc."""
    ready = link.ready
    if ready and ready[0].request == request:
        first = ready.pop(0)
        pair = first.local, link.collect(first.share) if isinstance(first.share, Pending) else first.share
    else:
        _drop(link, ready)
        pair = _draw(link, op, request, link.fetch)
    if link.prefetch:
        link.ahead.append(Prefetched(request, *_draw(link, op, request, link.submit)))
    return pair


def _drop(link: DealerLink, held: list[Prefetched]) -> None:
    """Give up pairs that will not be used (party 0 counts their bytes: they were sent)."""
    for stale in held:
        if isinstance(stale.share, Pending):
            link.discard(stale.share)
    held.clear()


def _draw(link: DealerLink, op: DealerOp, request: Request, fetch: Callable[..., Any]) -> tuple[Any, Any]:
    """This party's a_p and its share of C (party 0: what `fetch` gives, a tensor or a pending answer)."""
    shape = op.output_shape(request.shapes)
    (a,), c = op.party_shares(link.prg, link.rank, request, lambda r: fetch(r, shape))
    return a, c
