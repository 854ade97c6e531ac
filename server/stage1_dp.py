"""Distributed DP on Stage I aggregates: the party's noise key and release log
(docs/PRIVACY.md, "Differential privacy", Stage I).

With `[privacy] dp = true` a round's aggregate is clipped and opened inside 2PC
(`server.stage1_clip`): G = reveal_noised(Σ_{j∈S} w_j·SecClip(g_j, C)) with w_j = n_j/Σ n_k,
each party adding its own N(0, σ²), σ = z·C·max_j w_j, to its share before the opening.
Neither party can remove the other's noise, so the honest party's draw alone makes the
round a Gaussian mechanism with multiplier z on each member's clipped upload, whatever the
client sent.

Retry safety: this party's noise of round i is `mpc.dp_noise.keyed_gaussian` under
`round_key` = HMAC-SHA256(party noise key, "stage1|i|membership digest"), so a repeated
clip session of the round opens the same noise, never a second independent draw. The party
noise key is 32 bytes from the OS CSPRNG in `<data_dir>/dp/noise.key` (mode 0600, never sent
or logged). Every noised round is appended to `<data_dir>/dp/releases.jsonl` (fsynced) BEFORE
this party joins its clip session: round, z, and the member ids, which the accountant reads.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import threading
from pathlib import Path

from mpc import durable
from privacy.release_log import Release
from privacy.settings import DPSettings

KEY_BYTES = 32


class Stage1Privacy:
    """This party's Stage I noise keys and the log of noised rounds (module docstring)."""

    def __init__(self, data_dir: Path, settings: DPSettings) -> None:
        self.settings = settings
        self._dir = Path(data_dir) / "dp"
        durable.private_dir(self._dir)
        self._key = self._load_key()
        self._lock = threading.Lock()

    def _load_key(self) -> bytes:
        path = self._dir / "noise.key"
        if not path.exists():
            durable.atomic_write(path, os.urandom(KEY_BYTES))
            path.chmod(0o600)
        key = path.read_bytes()
        if len(key) != KEY_BYTES:
            raise ValueError(f"{path}: a DP noise key has {KEY_BYTES} bytes, found {len(key)}")
        return key

    def round_key(self, round_index: int, digest: str) -> bytes:
        """This party's noise key of round i over the membership `digest` (module docstring)."""
        label = f"stage1|{round_index}|{digest}".encode()
        return hmac.new(self._key, label, hashlib.sha256).digest()

    def record(self, round_index: int, members: list[str]) -> None:
        """Log round i as released with this party's z, durably, before its noise is used."""
        entry = {"round": round_index, "noise_multiplier": self.settings.noise_multiplier, "members": sorted(members)}
        with self._lock:
            durable.append_synced(self._dir / "releases.jsonl", (json.dumps(entry) + "\n").encode("utf-8"))

    def releases(self, up_to: int | None = None) -> list[Release]:
        """The noised Stage I rounds (≤ `up_to`), one `Release` per round (a retried round counted once)."""
        path = self._dir / "releases.jsonl"
        if not path.exists():
            return []
        by_round: dict[int, Release] = {}
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                entry = json.loads(line)
                label = f"stage1 round {int(entry['round'])}"
                members = tuple(str(m) for m in entry["members"])
                by_round[int(entry["round"])] = Release(label, float(entry["noise_multiplier"]), members)
        return [by_round[r] for r in sorted(by_round) if up_to is None or r <= up_to]
