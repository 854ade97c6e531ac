"""Per-round checkpoints of a job on one party: a strategy's `ResumableState` on disk.

After unlearning round t each party writes `checkpoints/t<t>/`:

    public.json     the state's public facts, the party's cost ledger, file index, digest
    p<k>.npy        public tensors (M̂_t, L-BFGS model differences), float64, no pickle
    s<k>.i64        this party's shares of the secrets ([δ^j], [y]), raw little-endian int64

The directory is written under a temporary name, every file fsynced, then renamed: a
checkpoint exists completely or not at all. A secret whose handle is the very one the
previous save of this `CheckpointDir` wrote (handles are immutable: an L-BFGS pair's [ŷ]
stays the same object for as long as it is buffered) is not exported, hashed or written
again: its file is hard-linked from the previous checkpoint, whose data was fsynced when
written (the link itself is made durable with the directory). Only the two newest
checkpoints are kept: the two parties' workers run the rounds in lock step, so one holds
at most one checkpoint more than the other, and a resume agrees on the newer one both
hold (`server.workers.agree.minimum`). `digest` covers the public state and tensors
(not the party-local costs), so both parties can check they resume from the same point.
Nothing is pickled; a loaded checkpoint is checked against its file index. Only the
`unlearning.strategy` base-class interface is used: the state's three parts on saving,
`Strategy.restore_state` on loading; shares go through the backend's `export_shares` and
`load_shares`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets as pysecrets
import shutil
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mpc import durable
from server.file_modes import DIR_MODE, private_dir

if TYPE_CHECKING:  # torch and the algorithm load only in job workers, not at party start
    from mpc.backend import Secret
    from unlearning.strategy import ResumableState, Strategy

CKPT_RE = re.compile(r"^t(\d{6})$")
KEEP = 2  #: checkpoints kept: the newest and the one before (module docstring)
ExportShare = Callable[["Secret"], tuple[np.ndarray, int]]
"""This party's int64 share of a secret and its scale exponent (`Backend.export_shares`)."""
LoadShare = Callable[[np.ndarray, int], "Secret"]
"""Wrap this party's int64 share with its scale exponent (`Backend.load_shares`)."""


class CheckpointError(RuntimeError):
    """A checkpoint is missing, incomplete or does not match its index."""


def state_digest(public: dict[str, Any], tensors: dict[str, np.ndarray]) -> str:
    """Hash of the public state (same on both parties after the same round)."""
    h = hashlib.sha256(json.dumps(public, sort_keys=True).encode())
    for name in sorted(tensors):
        arr = np.ascontiguousarray(tensors[name], dtype="<f8")
        h.update(name.encode() + b"\x00" + str(arr.shape).encode() + arr.tobytes())
    return h.hexdigest()


class CheckpointDir:
    """The checkpoints of one job on one party."""

    def __init__(self, root: Path):
        self.root = Path(root)
        private_dir(self.root)
        for stale in self.root.glob(".tmp-*"):
            shutil.rmtree(stale, ignore_errors=True)
        #: the secrets of this object's last save, by name: their handle, file and index entry
        self._saved: dict[str, tuple[weakref.ref[Any], Path, dict[str, Any]]] = {}

    def rounds(self) -> list[int]:
        """Unlearning rounds with a complete checkpoint, ascending."""
        found = [int(m.group(1)) for p in self.root.iterdir() if (m := CKPT_RE.match(p.name))]
        return sorted(found)

    def latest(self) -> int:
        """The newest checkpointed round, 0 when none."""
        rounds = self.rounds()
        return rounds[-1] if rounds else 0

    def save(self, state: ResumableState, costs: dict[str, Any], export_share: ExportShare) -> str:
        """Write the checkpoint of `state.round` (then drop all but the `KEEP` newest); returns its digest."""
        import torch

        public = state.public_json()
        tensors = {k: v.detach().to(torch.float64).cpu().numpy() for k, v in state.public_tensors().items()}
        digest = state_digest(public, tensors)
        tmp = self.root / f".tmp-{pysecrets.token_hex(6)}"
        tmp.mkdir(mode=DIR_MODE)
        final = self.root / f"t{state.round:06d}"
        index: dict[str, Any] = {"public": public, "costs": costs, "digest": digest, "tensors": {}, "secrets": {}}
        for k, (name, arr) in enumerate(sorted(tensors.items())):
            path = tmp / f"p{k}.npy"
            with durable.synced_file(path) as fh:
                np.save(fh, arr, allow_pickle=False)
            index["tensors"][name] = path.name
        saved = {}
        for k, (name, secret) in enumerate(sorted(state.secrets().items())):
            file = f"s{k}.i64"
            index["secrets"][name] = self._write_secret(tmp / file, name, secret, export_share)
            saved[name] = (weakref.ref(secret), final / file, index["secrets"][name])
        with durable.synced_file(tmp / "public.json") as fh:
            fh.write(json.dumps(index, sort_keys=True).encode())
        durable.fsync_dir(tmp)
        old = self.root / f".tmp-{pysecrets.token_hex(6)}"
        if final.exists():  # moved aside whole (a kill never leaves a partly deleted checkpoint)
            os.replace(final, old)
        durable.publish(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
        self._saved = saved
        for stale in self.rounds()[:-KEEP]:
            shutil.rmtree(self.root / f"t{stale:06d}", ignore_errors=True)
        return digest

    def _write_secret(self, path: Path, name: str, secret: Secret, export_share: ExportShare) -> dict[str, Any]:
        """This party's share of `secret` at `path`: linked from the last save when it wrote this
        very handle, else exported and written (fsynced). Returns its index entry."""
        last = self._saved.get(name)
        if last is not None and last[0]() is secret and last[1].exists():
            os.link(last[1], path)
            return {**last[2], "file": path.name}
        share, bits = export_share(secret)
        if share.dtype != np.int64:
            raise CheckpointError(f"share of {name!r} is {share.dtype}, not int64")
        data = np.ascontiguousarray(share, dtype="<i8").tobytes()
        with durable.synced_file(path) as fh:
            fh.write(data)
        return {"file": path.name, "shape": list(share.shape), "bits": bits, "sha256": hashlib.sha256(data).hexdigest()}

    def digest(self, round_index: int) -> str:
        return str(self._index(round_index)["digest"])

    def _index(self, round_index: int) -> dict[str, Any]:
        path = self.root / f"t{round_index:06d}" / "public.json"
        try:
            return json.loads(path.read_text())
        except FileNotFoundError:
            raise CheckpointError(f"no checkpoint of unlearning round {round_index}") from None
        except json.JSONDecodeError as exc:
            raise CheckpointError(f"checkpoint {round_index} is corrupt: {exc}") from None

    def load(
        self, round_index: int, strategy: type[Strategy], load_share: LoadShare
    ) -> tuple[ResumableState, dict[str, Any]]:
        """The state `strategy` stored after `round_index` and the party's cost ledger at that point."""
        import torch

        index = self._index(round_index)
        folder = self.root / f"t{round_index:06d}"
        tensors: dict[str, np.ndarray] = {}
        for name, file in index["tensors"].items():
            tensors[name] = np.load(folder / file, allow_pickle=False)
        if state_digest(index["public"], tensors) != index["digest"]:
            raise CheckpointError(f"checkpoint {round_index}: public state does not match its digest")
        secrets: dict[str, Secret] = {}
        for name, meta in index["secrets"].items():
            data = (folder / meta["file"]).read_bytes()
            if hashlib.sha256(data).hexdigest() != meta["sha256"]:
                raise CheckpointError(f"checkpoint {round_index}: share file of {name!r} is corrupt")
            arr = np.frombuffer(data, dtype="<i8").astype(np.int64).reshape(meta["shape"])
            secrets[name] = load_share(arr, int(meta["bits"]))
        state = strategy.restore_state(index["public"], {k: torch.from_numpy(v) for k, v in tensors.items()}, secrets)
        return state, index["costs"]

    def remove_all(self) -> None:
        """Delete every checkpoint (the job is over; they hold shares of remaining clients)."""
        shutil.rmtree(self.root, ignore_errors=True)


def held_checkpoint(job_dir: Path, reported: int = 0) -> int:
    """The newest checkpoint a party holds for a job. Its directory is the durable truth: a
    worker killed between writing a checkpoint and reporting it leaves `reported` behind.

    Read only (no `CheckpointDir`, whose constructor removes temporary folders): the job's
    worker may be writing its next checkpoint meanwhile.
    """
    try:
        found = [int(m.group(1)) for p in (job_dir / "checkpoints").iterdir() if (m := CKPT_RE.match(p.name))]
    except FileNotFoundError:
        found = []
    return max([reported, *found])
