"""Plaintext FL simulator: Stage I of Starfish with every client in one process.

`simulate(config)` partitions a dataset among N clients, poisons the target clients'
data with a backdoor, runs T rounds of FedAvg (`evaluation.training`) from a seeded M_0,
and records exactly what clients would upload in each round: the pseudo-gradient
g_i^j (float32), ‖g_i^j‖, the tolerance threshold δ_i^j (rate α) and n_j. The result
turns into an `InMemoryHistory` on any backend (values enter through `backend.share`)
and a `SimulatedOracle` that recomputes gradients for the remaining clients. With
`upload_dp` the clients privatize every upload with FedADP's adaptive Gaussian mechanism
before sending it (`evaluation.upload_dp`): the server aggregates the noised uploads,
the history stores them, and it declares the mechanism and the budgets used.

Defaults and why: N = 20, batch 64, SGD without momentum, α = 0.4 are the paper's
setting. The paper's η_l = 0.005 learned too slowly on 5k MNIST (11.9 % test error after
40 rounds in a prototype; the backdoor never took hold), so the default is η_l = 0.05
with 2 local epochs. Measured here on 5k MNIST after 40 rounds (docs/QUALITY.md):
η_l = 0.05 gives 5.4 % test error and 88.9 % backdoor success, η_l = 0.1 gives 3.6 % and
95.6 % and converges sooner, which narrows the gap of Starfish's ⌈σT⌉-round replay.
Both are settings.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from client_sdk.stats import l2_norm, tolerance_threshold
from evaluation.attacks import TriggerSpec, backdoor_data
from evaluation.dataset_probe import DatasetProbe
from evaluation.datasets import Dataset, load_dataset
from evaluation.models import initial_model, input_shape
from evaluation.partition import partition
from evaluation.simulation_config import SimulationConfig
from evaluation.training import ClientData, LocalTrainer, apply_update, fedavg, train_round
from evaluation.upload_dp import UploadPrivatizer
from mpc.backend import Backend
from unlearning.history import InMemoryHistory, RoundInfo, UploadPrivacy

#: called after each completed round with (round, total rounds)
RoundCallback = Callable[[int, int], None]


@dataclass
class Federation:
    """The clients' local data and the shared local-training routine."""

    config: SimulationConfig
    dataset: Dataset
    clients: list[ClientData]
    targets: tuple[str, ...]
    trigger: TriggerSpec
    clean_target_data: dict[str, tuple[np.ndarray, np.ndarray]]  #: target id → its data before poisoning
    trainer: LocalTrainer

    def client(self, client_id: str) -> ClientData:
        for c in self.clients:
            if c.client_id == client_id:
                return c
        raise KeyError(f"unknown client {client_id!r}")

    def remaining(self) -> list[ClientData]:
        return [c for c in self.clients if c.client_id not in self.targets]

    @property
    def n_samples(self) -> dict[str, int]:
        return {c.client_id: c.n_samples for c in self.clients}


def build_federation(config: SimulationConfig) -> Federation:
    """Partition the data, poison the targets, and set up local training."""
    cfg = config.resolved()
    ds = load_dataset(cfg.dataset)
    if input_shape(cfg.architecture) != ds.input_shape:
        raise ValueError(
            f"architecture {cfg.architecture} expects {input_shape(cfg.architecture)}, dataset gives {ds.input_shape}"
        )
    x, y = ds.train_x, ds.train_y
    if cfg.max_train_samples > 0:
        keep = np.sort(np.random.default_rng(cfg.seed).permutation(len(y))[: cfg.max_train_samples])
        x, y = x[keep], y[keep]
    parts = partition(y, cfg.num_clients, cfg.partition, cfg.seed, cfg.dirichlet_beta)
    trigger = TriggerSpec.for_shape(ds.input_shape[1], cfg.target_label)
    targets = tuple(cfg.client_id(j) for j in range(cfg.num_targets))
    clients, clean = [], {}
    for j, idx in enumerate(parts):
        cid = cfg.client_id(j)
        cx, cy = x[idx], y[idx]
        if cid in targets:
            clean[cid] = (cx, cy)
            cx, cy = backdoor_data(cx, cy, trigger, cfg.backdoor_copies)
        clients.append(
            ClientData(cid, j, torch.from_numpy(np.ascontiguousarray(cx)), torch.from_numpy(np.ascontiguousarray(cy)))
        )
    trainer = LocalTrainer(cfg.architecture, cfg.lr, cfg.local_epochs, cfg.batch_size)
    return Federation(cfg, ds, clients, targets, trigger, clean, trainer)


def run_fedavg(
    fed: Federation,
    clients: Sequence[ClientData],
    start: torch.Tensor,
    rounds: int,
    on_round: RoundCallback | None = None,
    sink: Callable[[int, dict[str, torch.Tensor]], None] | None = None,
    privatizer: UploadPrivatizer | None = None,
) -> list[torch.Tensor]:
    """T FedAvg rounds from `start` over `clients`; returns M_0..M_T and hands each
    round's uploads {client: g_i^j} to `sink(i, grads)`. With a `privatizer` the clients
    upload (and the server aggregates) privatized gradients."""
    models = [start.clone()]
    n = fed.n_samples
    for i in range(1, rounds + 1):
        g = train_round(fed.trainer, models[-1], clients, i, fed.config.seed)
        if privatizer is not None:
            g = privatizer(i, models[-1], g)
        models.append(apply_update(models[-1], fedavg(g, n), fed.config.lr))
        if sink is not None:
            sink(i, g)
        if on_round is not None:
            on_round(i, rounds)
    return models


@dataclass
class SimulationResult:
    """The recorded Stage I history (plaintext) and the federation that produced it."""

    federation: Federation
    models: list[torch.Tensor]  #: M_0..M_T, flat float32
    grads: np.ndarray  #: (T, N, m) float32, g_i^j in client order (may be a read-only memory map)
    norms: np.ndarray  #: (T, N) float64, ‖g_i^j‖
    deltas: np.ndarray  #: (T, N) float64, δ_i^j
    train_seconds: float = 0.0
    privacy: UploadPrivacy | None = None  #: the mechanism the clients applied to their uploads
    _retrain_models: list[torch.Tensor] | None = field(default=None, repr=False)

    @property
    def config(self) -> SimulationConfig:
        return self.federation.config

    @property
    def client_ids(self) -> list[str]:
        return [c.client_id for c in self.federation.clients]

    @property
    def targets(self) -> tuple[str, ...]:
        return self.federation.targets

    def gradient(self, i: int, client_id: str) -> torch.Tensor:
        """Stored g_i^j (1-based round)."""
        return torch.from_numpy(np.array(self.grads[i - 1, self.client_ids.index(client_id)], dtype=np.float32))

    def round_info(self, i: int) -> RoundInfo:
        ids = tuple(self.client_ids)
        return RoundInfo(index=i, clients=ids, n_samples=self.federation.n_samples, lr=self.config.lr)

    def history(self, backend: Backend) -> InMemoryHistory:
        """The history as the parties would hold it: public models, secret uploads."""
        hist = InMemoryHistory(
            models=[m.clone() for m in self.models],
            infos=[self.round_info(i) for i in range(1, len(self.models))],
            privacy=self.privacy,
        )
        for i in range(1, len(self.models)):
            for j, cid in enumerate(self.client_ids):
                hist.grads[(i, cid)] = backend.share(torch.from_numpy(np.array(self.grads[i - 1, j], dtype=np.float32)))
                hist.grad_norms[(i, cid)] = backend.share(torch.tensor(self.norms[i - 1, j], dtype=torch.float64))
                hist.deltas[(i, cid)] = backend.share(torch.tensor(self.deltas[i - 1, j], dtype=torch.float64))
        return hist

    def retrain_models(self, on_round: RoundCallback | None = None) -> list[torch.Tensor]:
        """M_0..M_T of FedAvg from the same M_0 without the targets (same data orders, clean
        uploads); cached."""
        if self._retrain_models is None:
            fed = self.federation
            self._retrain_models = run_fedavg(fed, fed.remaining(), self.models[0], self.config.rounds, on_round)
        return self._retrain_models

    def private_retrain_models(self) -> list[torch.Tensor]:
        """M_0..M_T of retraining without the targets under the same upload mechanism as the
        history (same data orders and noise keys; its own budgets along its own losses)."""
        if not self.config.upload_dp:
            raise ValueError("the history was recorded without upload privacy; use retrain_models()")
        fed = self.federation
        return run_fedavg(fed, fed.remaining(), self.models[0], self.config.rounds, privatizer=new_privatizer(fed))

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | Path) -> None:
        """Write the history as .npz (no pickled objects; config as a JSON string)."""
        meta = {"config": asdict(self.config), "train_seconds": self.train_seconds}
        meta["privacy"] = None if self.privacy is None else asdict(self.privacy)
        np.savez(
            Path(path),
            meta=np.array(json.dumps(meta)),
            models=torch.stack(self.models).numpy(),
            grads=self.grads,
            norms=self.norms,
            deltas=self.deltas,
        )

    @classmethod
    def load(cls, path: str | Path) -> SimulationResult:
        """Read a history written by `save`; the data partition is rebuilt from the config."""
        with np.load(Path(path), allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            fed = build_federation(SimulationConfig(**meta["config"]))
            models = [torch.from_numpy(m.copy()) for m in z["models"]]
            privacy = privacy_from_json(meta.get("privacy"))
            res = cls(fed, models, z["grads"], z["norms"], z["deltas"], float(meta["train_seconds"]), privacy)
        if res.grads.shape[:2] != (fed.config.rounds, fed.config.num_clients):
            raise ValueError(f"{path}: stored history does not match its config")
        return res


def privacy_from_json(value: dict | None) -> UploadPrivacy | None:
    """The `UploadPrivacy` written by `save` (None stays None)."""
    if value is None:
        return None
    return UploadPrivacy(
        mechanism=str(value["mechanism"]),
        clip_norm=float(value["clip_norm"]),
        delta=float(value["delta"]),
        budgets=tuple(float(e) for e in value["budgets"]),
        noise_std=tuple(float(x) for x in value["noise_std"]),
    )


def new_privatizer(fed: Federation) -> UploadPrivatizer:
    """The upload mechanism of `fed`'s config, with the loss F of the probe set."""
    cfg = fed.config
    probe = DatasetProbe(cfg.architecture, fed.dataset)
    slots = {c.client_id: c.index for c in fed.clients}
    return UploadPrivatizer(
        cfg.dp_clip_norm,
        cfg.dp_delta,
        cfg.dp_epsilon_0,
        cfg.dp_epsilon_min,
        cfg.dp_epsilon_max,
        cfg.dp_noise_seed,
        probe.loss,
        slots,
    )


def simulate(config: SimulationConfig, on_round: RoundCallback | None = None) -> SimulationResult:
    """Run Stage I and record every client's upload (g, ‖g‖, δ) as it would be sent
    (privatized first when the config asks for upload privacy)."""
    fed = build_federation(config)
    cfg = fed.config
    m0 = initial_model(cfg.architecture, cfg.seed)
    ids = [c.client_id for c in fed.clients]
    grads = np.zeros((cfg.rounds, len(ids), m0.numel()), dtype=np.float32)
    norms = np.zeros((cfg.rounds, len(ids)))
    deltas = np.zeros((cfg.rounds, len(ids)))

    def record(i: int, g: dict[str, torch.Tensor]) -> None:
        for j, cid in enumerate(ids):
            grads[i - 1, j] = g[cid].numpy()
            norms[i - 1, j] = l2_norm(grads[i - 1, j])
            deltas[i - 1, j] = tolerance_threshold(grads[i - 1, j], cfg.tolerance_rate)

    privatizer = new_privatizer(fed) if cfg.upload_dp else None
    start = time.perf_counter()
    models = run_fedavg(fed, fed.clients, m0, cfg.rounds, on_round, record, privatizer)
    privacy = None if privatizer is None else privatizer.declaration()
    return SimulationResult(fed, models, grads, norms, deltas, time.perf_counter() - start, privacy=privacy)
