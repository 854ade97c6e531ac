"""A trained deployment for the Stage II tests, and the plaintext reference run.

`TrainedService.create` starts party0 and party1 as real processes (TLS), trains a small
federated logistic regression for a few Stage I rounds with SDK clients in threads
(full-batch gradients, so "the exact gradient at a model" is deterministic), then keeps
the clients answering warm-up/correction tasks (`silenced(c)` stops one for a while).
The Stage II tests share one such service (session fixture `stage2` in conftest.py, made by
`stage2_service`, which a module needing a service of its own uses too); each job targets
other clients, and `erased` lists the targets of the jobs done so far.

`plaintext_reference` runs the job's strategy on PlainBackend over an InMemoryHistory built
from the same public models and memberships the service stored (clients erased before
the job left out)
and the same gradients the clients uploaded, with an oracle that answers exactly where the
service recorded answers.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from client_sdk.stats import l2_norm, tolerance_threshold
from harness.local import LocalDeployment
from mpc.backend import Backend, Secret
from mpc.plain_backend import PlainBackend
from server.store import Store
from unlearning import registry
from unlearning.history import GradientOracle, GradientRequest, InMemoryHistory, RoundInfo
from unlearning.strategy import UnlearnContext

from helpers.polling import poll

STAGE2_CLIENTS = [f"c{i}" for i in range(7)]  #: c6 is the evidence tests' own target
STAGE2_ROUNDS = 8
#: the operator's unlearning parameters of the shared service ([unlearning]); no anchored noise:
#: its jobs are compared draw for draw with plaintext runs
STAGE2_PARAMS = {"beta": 0.25, "anchor_noise": False}
TASK_TIMEOUT_S = 2.5  #: short, so a client that never answers costs little time
L2 = 1e-2
ALPHA = 0.4  #: the SDK's default tolerance rate
LR = 0.5
DIM = 6


@dataclass
class LogReg:
    """Per-client data for L2-regularised logistic regression; c0's labels are flipped."""

    data: dict[str, tuple[np.ndarray, np.ndarray]]

    @classmethod
    def make(cls, clients: list[str], seed: int = 3, dim: int = DIM) -> LogReg:
        rng = np.random.default_rng(seed)  # test data only, not a secret
        w_true = rng.standard_normal(dim)
        data = {}
        for k, c in enumerate(clients):
            x = rng.standard_normal((20 + 4 * k, dim))
            y = ((x @ w_true + 0.3 * rng.standard_normal(x.shape[0])) > 0).astype(np.float64)
            data[c] = (x, 1.0 - y if c == "c0" else y)
        return cls(data)

    def n(self, client: str) -> int:
        return int(self.data[client][0].shape[0])

    @property
    def dim(self) -> int:
        """The number of model parameters."""
        return int(next(iter(self.data.values()))[0].shape[1])

    def gradient(self, client: str, params: np.ndarray) -> np.ndarray:
        x, y = self.data[client]
        w = np.asarray(params, dtype=np.float64)
        return x.T @ (1.0 / (1.0 + np.exp(-(x @ w))) - y) / x.shape[0] + L2 * w


@dataclass
class TrainedService:
    dep: LocalDeployment
    problem: LogReg
    rounds: int
    erased: list[str] = field(default_factory=list)  #: targets of the jobs that succeeded so far
    serving: dict[str, tuple[threading.Event, threading.Thread]] = field(default_factory=dict)

    @classmethod
    def create(
        cls,
        root: Path,
        clients: list[str],
        rounds: int = 8,
        jobs: dict | None = None,
        unlearning: dict | None = None,
        round_cfg: dict | None = None,
        privacy: dict | None = None,
        validation: dict | None = None,
        problem: LogReg | None = None,
        evaluation: dict | None = None,
    ) -> TrainedService:
        """`rounds` Stage I rounds; `jobs`, `unlearning`, `round_cfg`: overrides of those config tables;
        `problem`: the clients' data (default `LogReg.make(clients)`)."""
        dep = LocalDeployment(
            root,
            clients=clients,
            rounds={"deadline_s": 60.0, "poll_s": 0.05, "max_rounds": rounds, **(round_cfg or {})},
            unlearning=unlearning or {},
            privacy=privacy or {},
            validation=validation or {},
            evaluation=evaluation or {},
            jobs={
                "poll_s": 0.1,
                "retry_backoff_s": 0.3,
                "session_timeout_s": 30.0,
                # each attempt starts its worker: a worker kept on standby is a torch and
                # CrypTen import (≈ 2 s of CPU) per party start and per job, wasted when no
                # other job follows; the standby path runs in the demo and multi-host tests
                "standby": "off",
                **(jobs or {}),
            },
        )
        dep.start()
        svc = cls(dep, problem or LogReg.make(clients), rounds)
        try:
            svc._train(clients)
            for c in clients:
                svc.serve(c)
        except BaseException:
            svc.stop()
            raise
        return svc

    def _train(self, clients: list[str]) -> None:
        admin = self.dep.admin()
        admin.start_training("logreg", np.zeros(self.problem.dim, dtype=np.float32), LR)
        errors: list[BaseException] = []

        def client_loop(cid: str) -> None:
            try:
                with self.dep.client(cid) as cl:
                    cl.register()
                    for i in range(1, self.rounds + 1):
                        cl.run_round(
                            lambda p: (self.problem.gradient(cid, p), self.problem.n(cid)), after=i - 1, timeout_s=60
                        )
            except BaseException as exc:  # reported below
                errors.append(exc)

        workers = [threading.Thread(target=client_loop, args=(c,)) for c in clients]
        for w in workers:
            w.start()
        for w in workers:
            w.join(120)
        if errors:
            raise errors[0]
        # with DP, each round closes by a 2PC clip session
        if poll(lambda: admin.status().latest_committed >= self.rounds, 120, 0.05) is None:
            raise TimeoutError("Stage I training did not finish")
        admin.close()

    def serve(self, cid: str) -> None:
        """Let client `cid` answer its tasks (exact full-batch gradient at the task's model)."""
        stop = threading.Event()

        def grad_fn(params: np.ndarray, task) -> tuple[np.ndarray, int]:
            return self.problem.gradient(cid, params), self.problem.n(cid)

        def loop() -> None:
            with self.dep.client(cid) as cl:
                while not stop.is_set():
                    try:
                        cl.serve_tasks(grad_fn, stop=stop)
                    except Exception:  # e.g. a party restarting; keep serving
                        stop.wait(0.2)

        thread = threading.Thread(target=loop, daemon=True, name=f"tasks-{cid}")
        thread.start()
        self.serving[cid] = (stop, thread)

    def unserve(self, cid: str) -> None:
        stop, thread = self.serving.pop(cid)
        stop.set()
        thread.join(5)

    @contextmanager
    def silenced(self, cid: str) -> Iterator[None]:
        """Client `cid` answers no task inside the block."""
        self.unserve(cid)
        try:
            yield
        finally:
            self.serve(cid)

    def stop(self) -> None:
        for cid in list(self.serving):
            self.serving[cid][0].set()
        self.dep.stop()
        for cid in list(self.serving):
            self.unserve(cid)

    def store(self, role: int) -> Store:
        return Store(self.dep.data_dir(role), role, readonly=True)

    def job_dir(self, role: int, job_id: str) -> Path:
        """Party `role`'s folder of job `job_id` (its worker's pid file, its checkpoints)."""
        return self.dep.data_dir(role) / "jobs" / job_id


@contextmanager
def stage2_service(root: Path) -> Iterator[TrainedService]:
    """A trained service in the shared Stage II shape (clients, rounds, task timeout, the
    operator's parameters), stopped on leaving."""
    svc = TrainedService.create(
        root,
        STAGE2_CLIENTS,
        rounds=STAGE2_ROUNDS,
        jobs={"task_timeout_s": TASK_TIMEOUT_S},
        unlearning={"parameters": STAGE2_PARAMS},
    )
    try:
        yield svc
    finally:
        svc.stop()


class MirrorOracle(GradientOracle):
    """Answers with the exact gradient for the clients the service recorded as answering."""

    def __init__(self, problem: LogReg, answered: Mapping[tuple[int, str], set[str]]):
        self.problem = problem
        self.answered = answered

    def exact_gradients(self, backend: Backend, request: GradientRequest) -> Mapping[str, Secret | None]:
        ok = self.answered[(request.unlearning_round, request.reason)]
        params = request.model.to(torch.float32).numpy()
        return {
            c: backend.share(torch.from_numpy(self.problem.gradient(c, params))) if c in ok else None
            for c in request.clients
        }


def plaintext_reference(
    svc: TrainedService, report: dict[str, Any], erased_before: frozenset[str] = frozenset()
) -> tuple[torch.Tensor, dict[str, Any]]:
    """The job's strategy (Starfish by default) on PlainBackend over the same history the job
    used (see module doc); `erased_before`: clients erased by earlier jobs, absent from this
    job's history."""
    backend = PlainBackend()
    store = svc.store(0)
    base = int(report["job"]["base_round"])
    models = [torch.from_numpy(store.global_model(i).params.copy()) for i in range(base + 1)]
    infos, grads, norms, deltas = [], {}, {}, {}
    for i in range(1, base + 1):
        members = {c: n for c, n in store.round_members(i).items() if c not in erased_before}
        infos.append(RoundInfo(index=i, clients=tuple(sorted(members)), n_samples=members, lr=LR))
        for c in members:
            g = svc.problem.gradient(c, store.global_model(i - 1).params)
            grads[(i, c)] = backend.share(torch.from_numpy(g))
            norms[(i, c)] = backend.share(torch.tensor(l2_norm(g), dtype=torch.float64))
            deltas[(i, c)] = backend.share(torch.tensor(tolerance_threshold(g, ALPHA), dtype=torch.float64))
    store.close()
    history = InMemoryHistory(models=models, infos=infos, grads=grads, grad_norms=norms, deltas=deltas)
    answered = {(e["t"], e["reason"]): set(e["answered"]) for e in report["corrections"]["events"]}
    ctx = UnlearnContext(
        backend=backend,
        history=history,
        oracle=MirrorOracle(svc.problem, answered),
        targets=tuple(report["job"]["targets"]),
        params=report["job"]["parameters"],
    )
    result = registry.create(report["job"]["strategy"]).run(ctx)
    return result.model, result.report


def relative_gap(a: np.ndarray | torch.Tensor, b: np.ndarray | torch.Tensor) -> float:
    x = torch.as_tensor(np.asarray(a, dtype=np.float64))
    y = torch.as_tensor(np.asarray(b, dtype=np.float64))
    if torch.equal(x, y):  # identical models, also when both are zero (a run that revealed no update)
        return 0.0
    return float((x - y).norm() / y.norm())
