"""What a job worker holds does not grow with the rounds it has replayed.

A Starfish job over `StoreHistory` (each party's real durable store, its shares read from
disk) under real 2PC (dealer and two party processes on 127.0.0.1): after every unlearning
round, the share bytes alive in the party (int64 tensors and arrays reachable from Python,
each storage counted once) are measured. Once the L-BFGS buffers are full (B pairs per
client, by design), they stay the same whatever the round: no stored round, estimate or
product is kept once its round is over (docs/JOBS.md, "Memory of a job worker").
"""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from mpc.backend import Backend, Secret
from mpc.cluster import TwoPartyCluster
from mpc.fixedpoint import share
from server.jobs.store_history import StoreHistory
from server.store import Store
from unlearning.history import GradientOracle, GradientRequest
from unlearning.starfish import StarfishStrategy
from unlearning.strategy import UnlearnContext

from helpers.synthetic_fl import fixed_noise

M, CLIENTS, ROUNDS, LR = 20_000, 5, 12, 0.5
ROUND_SHARES = CLIENTS * M * 8  #: one stored round's shares on one party (bytes)
PARAMS = {"sigma": 1.0, "beta": 0.25, "buffer_size": 2, "recovery_rounds": 0}


def curvatures() -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Client j's loss ½·0.01·Σ h_j(k)·(w(k) − c_j(k))² (diagonal, public to the test only)."""
    gen = torch.Generator().manual_seed(5)
    return {
        f"c{k}": (
            0.5 + torch.rand(M, generator=gen, dtype=torch.float64),
            torch.randn(M, generator=gen, dtype=torch.float64) * (3.0 if k == 0 else 1.0),
        )
        for k in range(CLIENTS)
    }


def gradient(problem: dict, client: str, model: torch.Tensor) -> torch.Tensor:
    h, centre = problem[client]
    return 0.01 * h * (model.to(torch.float64) - centre)


class QuadraticOracle(GradientOracle):
    """Remaining clients answer with their exact gradient at the requested model."""

    def __init__(self) -> None:
        self.problem = curvatures()

    def exact_gradients(self, backend: Backend, request: GradientRequest) -> dict[str, Secret | None]:
        return {c: backend.share(gradient(self.problem, c, request.model)) for c in request.clients}


def stage1() -> tuple[list[np.ndarray], list[dict[str, tuple[np.ndarray, ...]]]]:
    """FedAvg over every client: models M_0..M_T and per round each client's two sharings of (g, ‖g‖, δ)."""
    problem = curvatures()
    model = torch.zeros(M, dtype=torch.float32)
    models, uploads = [model.numpy()], []
    for _ in range(ROUNDS):
        grads = {c: gradient(problem, c, model) for c in sorted(problem)}
        uploads.append(
            {
                c: tuple(share(v) for v in (g.numpy(), np.array([float(g.norm())]), np.array([float(g.abs().max())])))
                for c, g in grads.items()
            }
        )
        model = (model.double() - LR * sum(grads.values()) / CLIENTS).float()
        models.append(model.numpy())
    return models, uploads


def write_store(root: Path, rank: int, models: list[np.ndarray], uploads: list[dict]) -> Store:
    """This party's store as Stage I leaves it (its own share of every upload), reopened read-only."""
    store = Store(root, rank)
    store.install_initial_model("toy", models[0], LR)
    for i, row in enumerate(uploads, start=1):
        previous = store.global_model_hash(i - 1)
        store.open_round(i, previous, deadline=1e12, lr=LR)
        for client, parts in row.items():
            store.put_upload(i, client, 10, *(p[rank] for p in parts), previous)
        store.set_round_state(i, "closed")
        store.set_membership(i, dict.fromkeys(row, 10))
        store.set_round_output(i, "toy", models[i], 0)
        store.commit_round(i)
    store.close()
    return Store(root, rank, readonly=True)


def live_share_bytes() -> int:
    """Bytes of the int64 storages reachable from Python (tensors and arrays), each counted once."""
    gc.collect()
    held: dict[int, int] = {}
    for obj in gc.get_objects():
        if type(obj) is torch.Tensor and obj.dtype == torch.int64:
            held[obj.untyped_storage().data_ptr()] = obj.untyped_storage().nbytes()
        elif type(obj) is np.ndarray and obj.dtype == np.int64 and obj.base is None:
            held[obj.ctypes.data] = obj.nbytes
    return sum(held.values())


def party_job(backend: Backend, rank: int, root: str, models: list[np.ndarray], uploads: list[dict]) -> dict[str, Any]:
    store = write_store(Path(root) / f"party{rank}", rank, models, uploads)
    held: dict[int, int] = {}
    ctx = UnlearnContext(
        backend=backend,
        history=StoreHistory(store, ROUNDS),
        oracle=QuadraticOracle(),
        targets=("c0",),
        params=PARAMS,
        on_checkpoint=lambda state: held.__setitem__(state.round, live_share_bytes()),
    )
    result = StarfishStrategy(noise=fixed_noise).run(ctx)
    return {"held": held, "kinds": [e["kind"] for e in result.report["rounds"]], "model": result.model}


@pytest.mark.timeout(300)
def test_the_shares_a_job_holds_do_not_grow_with_the_rounds(tmp_path: Path) -> None:
    models, uploads = stage1()
    with TwoPartyCluster(timeout=240) as cluster:
        out0, out1 = cluster.run(party_job, str(tmp_path), models, uploads)
    assert torch.equal(out0["model"], out1["model"])
    assert out0["kinds"].count("estimate") + out0["kinds"].count("check") >= 6  # estimated rounds to watch
    for out in (out0, out1):
        held = out["held"]
        assert sorted(held) == list(range(1, ROUNDS + 1))
        full = PARAMS["buffer_size"] + 3  # warm-up done, every client's buffer full
        steady = [held[t] for t in range(full, ROUNDS + 1)]
        # the B pairs per client, by design: Z_p (which is also [ŷ]) and E, m int64 each; the encoded
        # ŝ once per round (shared by every client's pair of that round); the prefetched product pair
        assert max(steady) <= (2 * PARAMS["buffer_size"] + 1) * ROUND_SHARES, steady
        # and the same after every later round of one kind: nothing of a finished round stays alive.
        # After an estimate round the next round's product pair is held (prefetched, ≤ n·m words);
        # after a check round, whose corrections change the products, nothing is drawn ahead
        kinds = out0["kinds"]
        for kind in ("estimate", "check"):
            same = [held[t] for t in range(full, ROUNDS) if kinds[t - 1] == kind]
            assert max(same) - min(same) <= ROUND_SHARES // 2, (kind, same)
        assert max(steady) - min(steady) <= ROUND_SHARES, steady
