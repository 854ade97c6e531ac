"""The open round's shares kept for the upload check (server.open_round_shares): handed out
once, only under the content hash the store holds, only for the newest round, within the
memory bound."""

from __future__ import annotations

import numpy as np

from server.open_round_shares import OpenRoundShares
from server.store import ShareBundle


def _bundle(m: int = 4, value: int = 1) -> ShareBundle:
    one = np.ones(1, dtype=np.int64)
    return ShareBundle(np.full(m, value, dtype=np.int64), one, one, 10)


def test_a_kept_share_is_handed_out_once_under_its_hash() -> None:
    shares = OpenRoundShares()
    bundle = _bundle()
    shares.add(3, "c1", "hash-a", bundle)
    assert shares.take(3, "c1", "hash-b") is None  # the store holds other content: read the store
    assert shares.take(2, "c1", "hash-a") is None
    assert shares.take(3, "c1", "hash-a") is bundle
    assert shares.take(3, "c1", "hash-a") is None  # taken: a re-run batch reads the store


def test_a_newer_round_drops_the_older_and_an_older_upload_is_not_kept() -> None:
    shares = OpenRoundShares()
    shares.add(3, "c1", "h", _bundle())
    shares.add(4, "c2", "h", _bundle())
    shares.add(3, "c3", "h", _bundle())
    assert shares.take(3, "c1", "h") is None and shares.take(3, "c3", "h") is None
    assert shares.take(4, "c2", "h") is not None


def test_uploads_past_the_memory_bound_are_not_kept_and_taking_frees_room() -> None:
    shares = OpenRoundShares(max_bytes=2 * 4 * 8)  # two shares of 4 words
    for client in ("c1", "c2", "c3"):
        shares.add(1, client, "h", _bundle())
    assert shares.take(1, "c3", "h") is None
    assert shares.take(1, "c1", "h") is not None
    shares.add(1, "c4", "h", _bundle())
    assert shares.take(1, "c4", "h") is not None and shares.take(1, "c2", "h") is not None


def test_the_first_share_kept_for_a_client_stays() -> None:
    shares = OpenRoundShares()
    shares.add(1, "c1", "h1", _bundle(value=1))
    shares.add(1, "c1", "h2", _bundle(value=2))
    assert shares.take(1, "c1", "h2") is None
    kept = shares.take(1, "c1", "h1")
    assert kept is not None and int(kept.gradient[0]) == 1
