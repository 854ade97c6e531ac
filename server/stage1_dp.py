"""Distributed DP on Stage I aggregates (docs/PRIVACY.md, "Differential privacy", Stage I).

With `[privacy] dp = true`, each party adds its own Gaussian noise to its share of the
round aggregate A = Σ_{j∈S} n_j·[g_j] (`server.aggregation.local_aggregate`) before the
exchange: A_p ← A_p + encode(N(0, σ_A²)) with σ_A = z·C·max_{j∈S} n_j, i.e. σ = z·C·max_j w_j
on the published G = decode(A)/Σ n_j. Neither party can remove the other's noise, so the
honest party's draw alone makes the round a Gaussian mechanism with multiplier z on each
member's clipped upload.

What is and is not enforced: the clipping of Stage I happens on the client
(`client_sdk.stats.clip_to_norm` with the operator's C) — the parties only see shares, so a
client that skips it is not bounded in Stage I; Stage II clips inside 2PC (SecClip).

Retry safety: the noise of round i is `mpc.dp_noise.keyed_gaussian` under
HMAC-SHA256(party noise key, "stage1|i|membership digest"), so a retried exchange sends the
same noised share, never a second independent draw. The party noise key is 32 bytes from
the OS CSPRNG in `<data_dir>/dp/noise.key` (mode 0600, never sent or logged). Every
noised round is appended to `<data_dir>/dp/releases.jsonl` (fsynced) BEFORE its share leaves
the party: round, z, and the member ids, which the accountant reads.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import threading
from pathlib import Path

import numpy as np

from mpc.dp_noise import keyed_gaussian
from server import blobs
from unlearning.distributed_dp import DPSettings, Release

KEY_BYTES = 32


class Stage1Privacy:
    """Noise for this party's aggregate shares and the log of noised rounds (module docstring)."""

    def __init__(self, data_dir: Path, settings: DPSettings, precision_bits: int) -> None:
        self.settings = settings
        self.precision_bits = precision_bits
        self._dir = Path(data_dir) / "dp"
        self._dir.mkdir(parents=True, exist_ok=True)
        self._key = self._load_key()
        self._lock = threading.Lock()

    def _load_key(self) -> bytes:
        path = self._dir / "noise.key"
        if not path.exists():
            blobs.atomic_write(path, os.urandom(KEY_BYTES))
            path.chmod(0o600)
        key = path.read_bytes()
        if len(key) != KEY_BYTES:
            raise ValueError(f"{path}: a DP noise key has {KEY_BYTES} bytes, found {len(key)}")
        return key

    def noised_share(self, round_index: int, digest: str, members: dict[str, int], share: np.ndarray) -> np.ndarray:
        """share + encode(N(0, σ_A²)) (wrapping int64), the round logged durably first."""
        z, clip = self.settings.noise_multiplier, self.settings.clip
        sigma_a = z * clip * max(members.values())
        label = f"stage1|{round_index}|{digest}".encode()
        key = hmac.new(self._key, label, hashlib.sha256).digest()
        noise = keyed_gaussian(key, (share.size,), sigma_a).numpy()
        encoded = np.round(noise * float(2**self.precision_bits)).astype(np.int64)
        self._record(round_index, z, sorted(members))
        with np.errstate(over="ignore"):
            return share + encoded

    def _record(self, round_index: int, z: float, members: list[str]) -> None:
        line = json.dumps({"round": round_index, "noise_multiplier": z, "members": members}) + "\n"
        path = self._dir / "releases.jsonl"
        with self._lock, path.open("a", encoding="utf-8") as fh:
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())

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
