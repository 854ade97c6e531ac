"""Histories and gradient oracles for benchmarks that run Starfish on both backends.

Shares. In the service each client splits its upload with CSPRNG masks and sends one
share to each party. A benchmark must give two party processes shares of a history that
lies on disk, without client processes, so each party derives the mask r of an upload
from a seeded generator keyed by the upload: party 0 holds x̄ − r and party 1 holds r
(mod 2^64), x̄ = round(x·2^f). Every protocol then costs and truncates exactly as on
client-made shares; the shared seed makes this sharing insecure, so it exists for
benchmarks only (`SeededHistory`, `SeededOracle`).

* `SeededHistory` — a stored Stage I history (models, g, ‖g‖, δ; arrays may be memory
  mapped) shared on demand;
* `SeededOracle` — answers warm-up/correction requests as `evaluation.simulated_oracle.SimulatedOracle`
  does; only party 0 trains (the other party derives its mask share), and the client
  compute time is recorded separately from the 2PC time;
* `SyntheticHistory` — Gaussian gradients of any model size for the per-step cost tables
  (no training): g_i^j ~ N(0, s_ij²), ‖g‖ exact, δ_i^j the α-quantile of |N(0, s_ij²)|;
* `cached_simulation` — a trained history reused between benchmarks (bench/.cache/).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from bench.env import CACHE_DIR, single_thread
from mpc.backend import Backend, Secret
from unlearning.history import GradientOracle, GradientRequest, RoundInfo, SharedHistory, UploadPrivacy

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def _seed_of(*key: object) -> int:
    return int.from_bytes(hashlib.sha256(repr(key).encode()).digest()[:8], "little") >> 1


def seeded_share(backend: Backend, x: torch.Tensor, *key: object) -> Secret:
    """This party's share of x under the benchmark sharing (module docstring); plain: x itself."""
    if not backend.is_secure:
        return backend.share(x)
    x = torch.as_tensor(x, dtype=torch.float64)
    gen = torch.Generator().manual_seed(_seed_of("mask", *key))
    r = torch.randint(INT64_MIN, INT64_MAX, tuple(x.shape), dtype=torch.long, generator=gen)
    if backend.rank == 1:  # type: ignore[attr-defined]
        return backend.load_shares(r)  # type: ignore[attr-defined]
    enc = torch.round(x * float(2**backend.f)).to(torch.long)  # type: ignore[attr-defined]
    return backend.load_shares(enc - r)  # type: ignore[attr-defined]


class SeededHistory(SharedHistory):
    """A stored history (numpy arrays, possibly memory-mapped) shared on demand."""

    def __init__(
        self,
        models: Sequence[torch.Tensor],
        client_ids: Sequence[str],
        n_samples: Mapping[str, int],
        lr: float,
        grads: np.ndarray,
        norms: np.ndarray,
        deltas: np.ndarray,
        seed: int = 0,
        privacy: UploadPrivacy | None = None,
    ) -> None:
        self._models = list(models)
        self._ids = list(client_ids)
        self._col = {c: k for k, c in enumerate(self._ids)}
        self._n = dict(n_samples)
        self._lr = lr
        self._grads, self._norms, self._deltas = grads, norms, deltas
        self._seed = seed
        self._privacy = privacy

    @property
    def num_rounds(self) -> int:
        return len(self._models) - 1

    def upload_privacy(self) -> UploadPrivacy | None:
        return self._privacy

    def model(self, i: int) -> torch.Tensor:
        return self._models[i]

    def round_info(self, i: int) -> RoundInfo:
        if not 1 <= i <= self.num_rounds:
            raise IndexError(f"round {i} outside 1..{self.num_rounds}")
        return RoundInfo(index=i, clients=tuple(self._ids), n_samples=self._n, lr=self._lr)

    def _rows(self, table: np.ndarray, i: int, clients: Sequence[str]) -> torch.Tensor:
        cols = [self._col[c] for c in clients]
        return torch.from_numpy(np.asarray(table[i - 1, cols], dtype=np.float64))

    def gradients(self, backend: Backend, i: int, clients: Sequence[str]) -> Secret:
        return seeded_share(backend, self._rows(self._grads, i, clients), self._seed, "g", i, tuple(clients))

    def norms(self, backend: Backend, i: int, clients: Sequence[str]) -> Secret:
        return seeded_share(backend, self._rows(self._norms, i, clients), self._seed, "n", i, tuple(clients))

    def thresholds(self, backend: Backend, i: int, clients: Sequence[str]) -> Secret:
        return seeded_share(backend, self._rows(self._deltas, i, clients), self._seed, "d", i, tuple(clients))


class SeededOracle(GradientOracle):
    """Exact gradients by local training (party 0 only), shared with seeded masks."""

    def __init__(self, result: object, rank: int = 0, seed: int = 0) -> None:
        from evaluation.simulated_oracle import SimulatedOracle

        self._inner = SimulatedOracle(result)  # type: ignore[arg-type]
        self._m = int(result.models[0].numel())  # type: ignore[attr-defined]
        self.rank = rank
        self.seed = seed
        self.client_seconds = 0.0
        self.calls: list[dict] = []

    def exact_gradients(self, backend: Backend, request: GradientRequest) -> Mapping[str, Secret | None]:
        out: dict[str, Secret | None] = {}
        for cid in request.clients:
            start = time.perf_counter()
            if self.rank == 0:
                g = self._inner.answer(request, cid).to(torch.float64)
            else:
                g = torch.zeros(self._m, dtype=torch.float64)
            self.client_seconds += time.perf_counter() - start
            out[cid] = seeded_share(backend, g, self.seed, "oracle", request.unlearning_round, request.reason, cid)
        self.calls.append({"t": request.unlearning_round, "reason": request.reason, "clients": list(request.clients)})
        return out

    def participation(self) -> dict[str, int]:
        """T_r^j: the number of distinct unlearning rounds in which client j was asked."""
        rounds: dict[str, set[int]] = {}
        for call in self.calls:
            for cid in call["clients"]:
                rounds.setdefault(cid, set()).add(call["t"])
        return {cid: len(r) for cid, r in rounds.items()}


class SyntheticHistory(SharedHistory):
    """Gaussian uploads of an m-parameter model (cost tables; see module docstring)."""

    def __init__(
        self, m: int, num_clients: int = 20, rounds: int = 40, alpha: float = 0.4, lr: float = 0.005, seed: int = 0
    ) -> None:
        self.m = m
        self.ids = [f"client-{j:02d}" for j in range(num_clients)]
        self._col = {c: k for k, c in enumerate(self.ids)}
        self._rounds = rounds
        self._lr = lr
        self._seed = seed
        rng = np.random.default_rng(seed)
        self.scale = 0.02 * (1.0 + 0.2 * rng.random((rounds, num_clients)))  # s_ij
        # δ with P(|N(0, s²)| > δ) = α  ⇒  δ = s·Φ⁻¹(1 − α/2)
        quantile = float(torch.special.ndtri(torch.tensor(1.0 - alpha / 2.0, dtype=torch.float64)))
        self.deltas = self.scale * quantile
        gen = torch.Generator().manual_seed(_seed_of(seed, "models"))
        models = [torch.randn(m, generator=gen) * 0.05]
        for _ in range(rounds):
            models.append(models[-1] - lr * 0.02 * torch.randn(m, generator=gen))
        self._models = models
        self._plain: dict[tuple[int, str], torch.Tensor] = {}

    @property
    def num_rounds(self) -> int:
        return self._rounds

    def model(self, i: int) -> torch.Tensor:
        return self._models[i]

    def round_info(self, i: int) -> RoundInfo:
        return RoundInfo(index=i, clients=tuple(self.ids), n_samples=dict.fromkeys(self.ids, 250), lr=self._lr)

    def plain_gradient(self, i: int, client: str) -> torch.Tensor:
        """g_i^j (plaintext, generated once and kept)."""
        key = (i, client)
        if key not in self._plain:
            gen = torch.Generator().manual_seed(_seed_of(self._seed, "g", i, client))
            self._plain[key] = torch.randn(self.m, generator=gen, dtype=torch.float64) * float(
                self.scale[i - 1, self._col[client]]
            )
        return self._plain[key]

    def gradients(self, backend: Backend, i: int, clients: Sequence[str]) -> Secret:
        rows = torch.stack([self.plain_gradient(i, c) for c in clients])
        return seeded_share(backend, rows, self._seed, "g", i, tuple(clients))

    def norms(self, backend: Backend, i: int, clients: Sequence[str]) -> Secret:
        vals = torch.tensor(
            [float(torch.linalg.vector_norm(self.plain_gradient(i, c))) for c in clients], dtype=torch.float64
        )
        return seeded_share(backend, vals, self._seed, "n", i, tuple(clients))

    def thresholds(self, backend: Backend, i: int, clients: Sequence[str]) -> Secret:
        vals = torch.tensor([float(self.deltas[i - 1, self._col[c]]) for c in clients], dtype=torch.float64)
        return seeded_share(backend, vals, self._seed, "d", i, tuple(clients))


# ---------------------------------------------------------------------------- trained histories
def _cache_paths(config: object) -> tuple[Path, Path]:
    key = hashlib.sha256(json.dumps(asdict(config), sort_keys=True).encode()).hexdigest()[:16]  # type: ignore[call-overload]
    return CACHE_DIR / f"history-{key}.npz", CACHE_DIR / f"history-{key}-grads.npy"


def cached_simulation(config: object, log: bool = True) -> object:
    """`evaluation.simulator.simulate(config)`, cached in bench/.cache/ (gradients memory-mapped).

    Returns a `SimulationResult` whose `grads` is a read-only memory map, so party
    processes can open the same history without each holding a copy.
    """
    from evaluation.simulator import SimulationResult, build_federation, privacy_from_json, simulate

    meta_path, grads_path = _cache_paths(config)
    if not (meta_path.exists() and grads_path.exists()):
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        (CACHE_DIR / ".gitignore").write_text("*\n")
        start = time.perf_counter()

        def progress(i: int, total: int) -> None:
            if log and (i == total or i % max(1, total // 4) == 0):
                print(f"   training round {i}/{total} ({time.perf_counter() - start:.0f} s)", flush=True)

        with single_thread():
            res = simulate(config, on_round=progress)  # type: ignore[arg-type]
        # write under unique names, then rename: concurrent benchmarks may train the same history
        tmp = grads_path.with_name(f"{grads_path.stem}.{os.getpid()}.tmp.npy")
        np.save(tmp, res.grads, allow_pickle=False)
        tmp.replace(grads_path)
        meta = {"config": asdict(res.config), "train_seconds": res.train_seconds}
        meta["privacy"] = None if res.privacy is None else asdict(res.privacy)
        tmp_meta = meta_path.with_name(f"{meta_path.stem}.{os.getpid()}.tmp.npz")
        np.savez(
            tmp_meta,
            meta=np.array(json.dumps(meta)),
            models=torch.stack(res.models).numpy(),
            norms=res.norms,
            deltas=res.deltas,
        )
        tmp_meta.replace(meta_path)
    with np.load(meta_path, allow_pickle=False) as z:
        meta = json.loads(str(z["meta"]))
        models = [torch.from_numpy(m.copy()) for m in z["models"]]
        norms, deltas = z["norms"].copy(), z["deltas"].copy()
    fed = build_federation(type(config)(**meta["config"]))  # type: ignore[operator]
    grads = np.load(grads_path, mmap_mode="r", allow_pickle=False)
    privacy = privacy_from_json(meta.get("privacy"))
    return SimulationResult(fed, models, grads, norms, deltas, float(meta["train_seconds"]), privacy=privacy)


def seeded_history(result: object, seed: int = 0) -> SeededHistory:
    """The `SeededHistory` of a `SimulationResult`."""
    fed = result.federation  # type: ignore[attr-defined]
    return SeededHistory(
        result.models,
        result.client_ids,
        fed.n_samples,
        result.config.lr,  # type: ignore[attr-defined]
        result.grads,
        result.norms,
        result.deltas,
        seed,
        result.privacy,  # type: ignore[attr-defined]
    )
