"""The `matmul_fixed` pairs of the next round, drawn and requested while this round goes on.

An update-estimation round makes the same fixed-operand products as the round before it
while the clients' buffers stay the same (`lbfgs.expand`: one product per group of
clients, the same fixed rows, the same shapes). So after each product both parties draw
the pair (A, [C = A·B]) for the same request once more and keep it on the session's link
(`DealerLink.prefetched`): party 0 submits that request to the dealer at once and does
not wait (`mpc.plane.dealer_worker`), so the dealer computes and sends C's share while
the parties finish this round and start the next; the next round's product finds its
pair ready.

Order invariant. The dealer's streams are positional: the dealer and both parties must
draw every request's material in the same sequence. `fixed_matmul_pair` is called by both
parties at the same protocol step with the same request (the backend's `_sync` checks the
request) and does, on both, exactly:

1. if the first held pair was drawn for this request, take it; otherwise drop every held
   pair (its draws stay spent on both sides alike, party 0 counts its bytes) and draw this
   product's pair now;
2. if the caller said the product comes again (`link.prefetch` True, set by
   `Primitives.fixed_repeats(True)` on both parties at the same protocol step; False
   otherwise), draw the next round's pair for this request (party 0: submit it) and hold
   it last.

Each step depends only on the request and on what was held, which both parties hold
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


def fixed_matmul_pair(link: DealerLink, op: DealerOp, request: Request) -> tuple[torch.Tensor, torch.Tensor]:
    """(a_p, [a @ B]_p) for a `matmul_fixed` request: steps 1 and 2 of the module doc."""
    held = link.prefetched
    if held and held[0].request == request:
        first = held.pop(0)
        pair = first.local, link.collect(first.share) if isinstance(first.share, Pending) else first.share
    else:
        for stale in held:
            if isinstance(stale.share, Pending):
                link.discard(stale.share)
        held.clear()
        pair = _draw(link, op, request, link.fetch)
    if link.prefetch:
        held.append(Prefetched(request, *_draw(link, op, request, link.submit)))
    return pair


def _draw(link: DealerLink, op: DealerOp, request: Request, fetch: Callable[..., Any]) -> tuple[Any, Any]:
    """This party's a_p and its share of C (party 0: what `fetch` gives, a tensor or a pending answer)."""
    shape = op.output_shape(request.shapes)
    (a,), c = op.party_shares(link.prg, link.rank, request, lambda r: fetch(r, shape))
    return a, c
