"""Simulated FL clients that talk to the real parties through the client SDK.

Each client is a thread holding a `client_sdk.Client` (gRPC over TLS to party0 and party1,
its own credential) and its local data from `evaluation.simulator.build_federation`: the
same partition, backdoor and per-round data orders as the plaintext simulator, so the
plaintext retrain reference of the demo uses exactly the clients' data.

Stage I (docs/SERVICE.md, "Round protocol"): for round i the client waits until the round is open on both parties,
fetches M_{i−1} (refused unless both parties serve the same hash), trains locally and
submits its pseudo-gradient g_i^j = (M_{i−1} − M_local)/η_l with n_j; the SDK computes
‖g‖ and δ (rate α) and sends additive shares to the two parties.

Stage II (docs/JOBS.md §4): `serve_tasks` answers warm-up/correction tasks ("your exact
gradient at M̂ for original round i") with the data order of round i.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from client_sdk import Client, errors
from client_sdk.client import RoundView, TaskInfo
from client_sdk.evaluation import EvalCounts
from evaluation.attacks import backdoor_eval_set
from evaluation.simulator import Federation
from evaluation.training import ClientData, LocalTrainer, order_seed
from evaluation.unlearning_metrics import per_sample_losses

#: a failed round-state poll (e.g. a server error while a round commits) is retried this often
POLL_RETRIES = 3
POLL_RETRY_S = 0.5
#: called by client threads after each submitted round with (client id, round, bytes sent)
UploadCallback = Callable[[str, int, int], None]


@dataclass
class ClientRun:
    """What one client thread did (public facts only)."""

    client_id: str
    rounds: list[int] = field(default_factory=list)
    bytes_sent: int = 0
    train_seconds: float = 0.0
    tasks_answered: int = 0
    error: str = ""


@dataclass(frozen=True)
class HeldOut:
    """A client's own held-out data for the federated evaluation (docs/JOBS.md §7): its shard
    of the test set (every n-th image from its index on) and, as the probe, the shard's
    images of other labels with the backdoor trigger stamped on (a hit: the model answers
    the trigger's target label)."""

    architecture: str
    x: np.ndarray
    y: np.ndarray
    probe_x: np.ndarray
    probe_label: int

    @classmethod
    def of(cls, federation: Federation, index: int) -> HeldOut:
        ds, n = federation.dataset, len(federation.clients)
        x, y = ds.test_x[index::n], ds.test_y[index::n]
        trigger = federation.trigger
        probe = backdoor_eval_set(x, y, trigger)
        return cls(federation.config.architecture, x, y, probe, trigger.target_label)

    def counts(self, new: np.ndarray, old: np.ndarray, task: object = None) -> EvalCounts:
        """The evaluation answer: M̂ and M_T scored on this data (`Client.serve_tasks`' eval_fn)."""
        right = [int((self._predict(p, self.x) == self.y).sum()) for p in (new, old)]
        hits = [int((self._predict(p, self.probe_x) == self.probe_label).sum()) for p in (new, old)]
        return EvalCounts(right[0], right[1], len(self.y), hits[0], hits[1], len(self.probe_x))

    def _predict(self, params: np.ndarray, x: np.ndarray) -> np.ndarray:
        model = torch.from_numpy(np.asarray(params, dtype=np.float32).copy())
        labels = np.zeros(len(x), dtype=np.int64)  # the losses are not used, only the predictions
        return per_sample_losses(self.architecture, model, x, labels)[1]


class SimulatedClient:
    """One FL client: local data, its own trainer (modules are not shared between threads) and an SDK client."""

    def __init__(self, data: ClientData, federation: Federation, sdk: Client) -> None:
        cfg = federation.config
        self.data = data
        self.seed = cfg.seed
        self.trainer = LocalTrainer(cfg.architecture, cfg.lr, cfg.local_epochs, cfg.batch_size)
        self.sdk = sdk
        self.run_info = ClientRun(data.client_id)
        self.held_out = HeldOut.of(federation, data.index)

    @property
    def client_id(self) -> str:
        return self.data.client_id

    def gradient(self, params: np.ndarray, original_round: int) -> tuple[np.ndarray, int]:
        """Pseudo-gradient at `params` with the data order of round `original_round` (evaluation.training)."""
        start = time.perf_counter()
        model = torch.from_numpy(np.asarray(params, dtype=np.float32).copy())
        g = self.trainer.pseudo_gradient(model, self.data, order_seed(self.seed, self.data.index, original_round))
        self.run_info.train_seconds += time.perf_counter() - start
        return g.numpy(), self.data.n_samples

    def train(self, rounds: int, on_upload: UploadCallback | None, timeout_s: float) -> None:
        """Take part in rounds 1..`rounds` (each waits for the round to open)."""
        try:
            done = 0
            while done < rounds:
                view = self._wait_for_round(done, timeout_s)
                model = self.sdk.fetch_model(view.round - 1)
                if model.hash != view.model_hash:
                    raise RuntimeError(
                        f"round {view.round} opens from {view.model_hash[:12]}, fetched {model.hash[:12]}"
                    )
                gradient, n = self.gradient(model.params, view.round)
                receipt = self.sdk.submit(view.round, gradient, n, model_hash=model.hash)
                done = view.round
                self.run_info.rounds.append(done)
                self.run_info.bytes_sent += receipt.bytes_sent
                if on_upload is not None:
                    on_upload(self.client_id, done, receipt.bytes_sent)
        except Exception as exc:  # reported by the fleet; the demo fails with this message
            self.run_info.error = f"{type(exc).__name__}: {exc}"

    def _wait_for_round(self, after: int, timeout_s: float) -> RoundView:
        """`Client.wait_for_round`, polled again after a failed poll (read-only, so safe to repeat)."""
        for attempt in range(POLL_RETRIES + 1):
            try:
                return self.sdk.wait_for_round(after=after, timeout_s=timeout_s)
            except (
                errors.AuthenticationError,
                errors.NotRegisteredError,
                errors.ModelMismatchError,
                errors.BadRoundError,
            ):
                raise
            except errors.StarfishError:
                if attempt == POLL_RETRIES:
                    raise
                time.sleep(POLL_RETRY_S)
        raise AssertionError("unreachable")

    def answer_task(self, params: np.ndarray, task: TaskInfo) -> tuple[np.ndarray, int]:
        self.run_info.tasks_answered += 1
        return self.gradient(params, task.original_round)

    def serve(self, stop: threading.Event) -> None:
        """Answer tasks (and evaluation tasks, on this client's held-out data) until `stop` is
        set; an error is recorded, not raised (the job then skips us)."""
        try:
            self.sdk.serve_tasks(self.answer_task, stop, eval_fn=self.held_out.counts)
        except Exception as exc:
            self.run_info.error = f"task handler: {type(exc).__name__}: {exc}"


class Fleet:
    """All simulated clients of a federation, connected to one deployment."""

    def __init__(self, federation: Federation, connect: Callable[[str], Client]) -> None:
        self.federation = federation
        self.clients = [SimulatedClient(c, federation, connect(c.client_id)) for c in federation.clients]
        self._task_threads: list[tuple[threading.Event, threading.Thread]] = []

    def close(self) -> None:
        self.stop_tasks()
        for c in self.clients:
            c.sdk.close()

    def register(self) -> None:
        """Enrol every client on both parties (before training starts, so round 1 waits for all)."""
        for c in self.clients:
            c.sdk.register()

    def train(self, rounds: int, on_upload: UploadCallback | None = None, timeout_s: float = 600.0) -> list[ClientRun]:
        """Run Stage I with every client in its own thread; raises if any client failed."""
        threads = [
            threading.Thread(
                target=c.train, args=(rounds, on_upload, timeout_s), name=f"client-{c.client_id}", daemon=True
            )
            for c in self.clients
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if self.failures():
            raise RuntimeError("client(s) failed during training: " + "; ".join(self.failures()))
        return [c.run_info for c in self.clients]

    def serve_tasks(self, exclude: tuple[str, ...] = ()) -> None:
        """Start answering warm-up/correction tasks in the background (all clients but `exclude`)."""
        for c in self.clients:
            if c.client_id in exclude:
                continue
            stop = threading.Event()
            t = threading.Thread(target=c.serve, args=(stop,), name=f"tasks-{c.client_id}", daemon=True)
            t.start()
            self._task_threads.append((stop, t))

    def stop_tasks(self) -> None:
        for stop, _ in self._task_threads:
            stop.set()
        for _, t in self._task_threads:
            t.join(10.0)
        self._task_threads = []

    def failures(self) -> list[str]:
        """Errors of client threads so far ("client: error")."""
        return [f"{c.client_id}: {c.run_info.error}" for c in self.clients if c.run_info.error]

    @property
    def tasks_answered(self) -> dict[str, int]:
        return {c.client_id: c.run_info.tasks_answered for c in self.clients}
