"""Shared pieces of the fault tests.

* Deterministic client data: `gradient(client, round, m)` and `samples(client)`, so a test
  (and a restarted client process) knows every upload without recording it.
* `configure` / `start_training` / `deployment`: a deployment with fast polling; started with
  M_0 = 0 installed.
* `ClientThreads`: SDK clients as threads taking part in rounds 1..R through `run_round`,
  resuming after `PartyUnreachableError`, recording the receipts (both parties acknowledged).
* `submit_threads` / `receipts_of`: one round's uploads of several clients in flight at once
  (while a fault is injected), then their receipts once every submit returned.
* The invariants checked after every fault: `check_acked_counted` (every acknowledged upload
  is stored on both parties, with the binding of its receipt, and counted in its round) and
  `check_models` (every committed model equals plaintext FedAvg of its members within the
  fixed-point tolerance, and both parties committed the same model).
"""

from __future__ import annotations

import threading
import time
import zlib
from pathlib import Path

import numpy as np

from client_sdk import PartyUnreachableError
from harness.local import LocalDeployment
from server.store import Store

from helpers.stage1_helpers import fedavg_step, tolerance

LR = 0.1


def gradient(client: str, round_index: int, m: int) -> np.ndarray:
    """Entries N(0, s²) with s = min(0.5, 8/√m): ‖g‖ ≈ 8 at most, inside the upload check's bound
    (the largest the ring allows, 16 at f = 16 for these model sizes; docs/PRIVACY.md)."""
    scale = min(0.5, 8.0 / np.sqrt(m))
    return np.random.default_rng(zlib.crc32(f"{client}/{round_index}".encode())).normal(scale=scale, size=m)


def samples(client: str) -> int:
    return 5 + zlib.crc32(client.encode()) % 20


def configure(
    root: Path, clients: list[str], min_cohort: int = 3, limits: dict | None = None, **rounds
) -> LocalDeployment:
    """A deployment of `clients` with fast round polling, not started yet (a test may mount a
    file system over a party's data dir first)."""
    return LocalDeployment(
        root,
        clients=clients,
        rounds={"poll_s": 0.05, "peer_retry_s": 0.1, **rounds},
        privacy={"min_cohort": min_cohort},
        limits=dict(limits or {}),
    )


def start_training(dep: LocalDeployment, m: int) -> LocalDeployment:
    """Start the dealer and both parties; install M_0 = 0 ∈ R^m with learning rate LR."""
    dep.start()
    with dep.admin() as admin:
        admin.start_training("toy", np.zeros(m, dtype=np.float32), LR)
    return dep


def deployment(root: Path, clients: list[str], m: int, min_cohort: int = 3, **rounds) -> LocalDeployment:
    """Both parties started, M_0 = 0 ∈ R^m installed with learning rate LR."""
    return start_training(configure(root, clients, min_cohort, **rounds), m)


def submit_threads(sdks: dict, clients: list[str], r: int, m: int, model_hash: str):
    """Start one thread per client submitting its round-r gradient; returns (threads, results),
    results filling with client → receipt (or the exception the submit raised)."""
    results: dict = {}

    def upload(client: str) -> None:
        try:
            results[client] = sdks[client].submit(r, gradient(client, r, m), samples(client), model_hash)
        except BaseException as exc:  # reported by `receipts_of`
            results[client] = exc

    threads = [threading.Thread(target=upload, args=(c,), daemon=True) for c in clients]
    for t in threads:
        t.start()
    return threads, results


def receipts_of(threads: list[threading.Thread], results: dict, clients: list[str], r: int) -> dict:
    """Join the submit threads; every submit returned a receipt: {(r, client): receipt}."""
    for t in threads:
        t.join(120)
    failed = {c: v for c, v in results.items() if isinstance(v, BaseException)}
    assert not failed and len(results) == len(clients), failed
    return {(r, c): results[c] for c in clients}


class ClientThreads:
    """One thread per client: rounds 1..`rounds` via `run_round`; receipts keyed by (round, client)."""

    def __init__(self, dep: LocalDeployment, clients: list[str], rounds: int, m: int, **client_kw):
        self.receipts: dict[tuple[int, str], object] = {}
        self.errors: list[BaseException] = []
        self.started = {r: threading.Event() for r in range(1, rounds + 1)}  #: some client began round r
        self._threads = [
            threading.Thread(target=self._run, args=(dep, c, rounds, m, client_kw), daemon=True) for c in clients
        ]

    def _run(self, dep: LocalDeployment, client: str, rounds: int, m: int, client_kw: dict) -> None:
        try:
            with dep.client(client, **client_kw) as sdk:
                sdk.register()
                for r in range(1, rounds + 1):
                    self.started[r].set()
                    receipt = self._one_round(sdk, client, r, m)
                    assert receipt.round == r, f"{client} submitted to round {receipt.round}, expected {r}"
                    self.receipts[(r, client)] = receipt
        except BaseException as exc:  # reported by the test
            self.errors.append(exc)

    @staticmethod
    def _one_round(sdk, client: str, r: int, m: int):
        for _ in range(20):
            try:
                return sdk.run_round(
                    lambda params: (gradient(client, r, m), samples(client)), after=r - 1, timeout_s=180
                )
            except PartyUnreachableError:
                time.sleep(0.5)  # the sharing stays in the outbox: the next call resends it
        raise AssertionError(f"{client} could not reach the parties in round {r}")

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def join(self, timeout_s: float) -> None:
        end = time.time() + timeout_s
        for t in self._threads:
            t.join(max(0.0, end - time.time()))
        alive = sum(t.is_alive() for t in self._threads)
        assert not alive, f"{alive} client thread(s) still running after {timeout_s} s"


def _stores(dep: LocalDeployment) -> list[Store]:
    return [Store(dep.data_dir(p), p, readonly=True) for p in (0, 1)]


def check_acked_counted(dep: LocalDeployment, receipts: dict) -> None:
    """Every acknowledged upload is held by both parties (its receipt's halves and binding) and
    is a member of its committed round."""
    stores = _stores(dep)
    try:
        for (r, client), receipt in receipts.items():
            for p, store in enumerate(stores):
                held = store.upload(r, client)
                assert held is not None, f"party{p} lost the acknowledged upload of {client} in round {r}"
                assert held.grad_sha256 == receipt.content_sha256[p] and held.binding_sha256 == receipt.binding_sha256
                assert store.round_record(r).state == "committed", f"round {r} not committed on party{p}"
                assert client in store.round_members(r), f"acknowledged upload of {client} not counted in round {r}"
    finally:
        for s in stores:
            s.close()


def check_models(dep: LocalDeployment, m: int) -> list[int]:
    """Every committed M_r equals FedAvg of round r's members (with their capped weights) from
    M_{r−1}, on both parties;
    returns the committed rounds."""
    stores = _stores(dep)
    try:
        rounds = stores[0].committed_rounds()
        for r in rounds:
            members = stores[0].round_members(r)
            assert members == stores[1].round_members(r), f"round {r}: the parties agreed on different members"
            previous, model = stores[0].global_model(r - 1).params, stores[0].global_model(r)
            assert stores[1].global_model_hash(r) == model.hash, f"round {r}: the parties committed different models"
            weights = stores[0].round_weights(r)  # n_j capped so no principal holds over 1/k (weight_cap)
            expected = fedavg_step(previous, [(gradient(c, r, m), weights[c]) for c in members], LR)
            worst = float(np.max(np.abs(model.params - expected)))
            assert np.all(np.abs(model.params - expected) <= tolerance(LR, expected)), (
                f"round {r}: committed model differs from FedAvg of its members by up to {worst:.3g}"
            )
        return rounds
    finally:
        for s in stores:
            s.close()
