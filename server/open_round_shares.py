"""The open round's acknowledged shares, kept in memory as they arrive: what the upload check
reads when the round closes instead of reading (and, for a seed-compressed share,
re-expanding) every share from the store (docs/SERVICE.md, "Upload check").

The store stays the record: an entry is used only under the content hash the store holds
for that upload, so a share the store does not hold (a refused upload, an older round, a
restart) is read from the store as before. Each entry is handed out once and then dropped,
so the shares leave memory when the round's check has read them. Memory is bounded by
`MAX_BYTES` per party; an upload past it is simply not kept. Kept only while the upload
check is on.
"""

from __future__ import annotations

import threading

from server.store import ShareBundle

MAX_BYTES = 1 << 29
"""512 MiB of shares at most (220 uploads of the paper's 582,026-parameter model)."""


class OpenRoundShares:
    """Per client of the newest round: (content hash, this party's shares)."""

    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self._lock = threading.Lock()
        self._round = -1
        self._held: dict[str, tuple[str, ShareBundle]] = {}
        self._bytes = 0
        self.max_bytes = max_bytes

    def add(self, round_index: int, client: str, digest: str, bundle: ShareBundle) -> None:
        """Keep an acknowledged upload of round `round_index` (a newer round drops the older)."""
        size = bundle.gradient.nbytes
        with self._lock:
            if round_index < self._round:
                return
            if round_index > self._round:
                self._round, self._held, self._bytes = round_index, {}, 0
            if client in self._held or self._bytes + size > self.max_bytes:
                return
            self._held[client] = (digest, bundle)
            self._bytes += size

    def take(self, round_index: int, client: str, digest: str) -> ShareBundle | None:
        """The shares of `client`'s round-`round_index` upload stored under `digest`, or None;
        handed out once (the check reads each upload once; a re-run batch reads the store)."""
        with self._lock:
            entry = self._held.get(client) if round_index == self._round else None
            if entry is None or entry[0] != digest:
                return None
            del self._held[client]
            self._bytes -= entry[1].gradient.nbytes
        return entry[1]
