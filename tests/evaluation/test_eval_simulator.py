"""The plaintext FL simulator: FedAvg identities, uploads, history, oracle, persistence."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from client_sdk.stats import l2_norm, tolerance_threshold
from evaluation.simulated_oracle import SimulatedOracle
from evaluation.simulator import SimulationConfig, SimulationResult, build_federation, simulate
from mpc.plain_backend import PlainBackend
from unlearning.history import GradientRequest

from helpers.eval_federations import SMALL


def test_models_follow_fedavg_of_the_recorded_gradients(small_run: SimulationResult) -> None:
    n = small_run.federation.n_samples
    weights = np.array([n[c] for c in small_run.client_ids], dtype=np.float64)
    for i in range(1, small_run.config.rounds + 1):
        g = small_run.grads[i - 1].astype(np.float64)
        aggregate = (weights[:, None] * g).sum(0) / weights.sum()  # G_i = Σ n_j g_i^j / Σ n_j
        expected = small_run.models[i - 1].double().numpy() - small_run.config.lr * aggregate
        np.testing.assert_allclose(small_run.models[i].double().numpy(), expected, rtol=0, atol=1e-6)
        assert not torch.equal(small_run.models[i], small_run.models[i - 1])


def test_recorded_gradients_are_pseudo_gradients_of_local_training(small_run: SimulationResult) -> None:
    fed = small_run.federation
    cid = small_run.client_ids[2]
    oracle = SimulatedOracle(small_run)
    g = oracle.exact_gradient(small_run.models[1], cid, 2)
    # (M_{i−1} − M_local)/η_l: moving by −η_l·g is what the client's local SGD did
    assert torch.equal(g, small_run.gradient(2, cid))
    assert fed.trainer.lr == SMALL.lr and g.dtype == torch.float32


def test_norms_and_thresholds_are_those_of_the_uploaded_gradient(small_run: SimulationResult) -> None:
    for i in range(small_run.config.rounds):
        for j in range(len(small_run.client_ids)):
            g = small_run.grads[i, j]
            assert small_run.norms[i, j] == pytest.approx(l2_norm(g), rel=1e-12)
            assert small_run.deltas[i, j] == tolerance_threshold(g, small_run.config.tolerance_rate)
            assert 0 < small_run.deltas[i, j] < np.abs(g).max()


def test_history_holds_shared_uploads_and_public_models(small_run: SimulationResult) -> None:
    backend = PlainBackend()
    hist = small_run.history(backend)
    assert hist.num_rounds == SMALL.rounds and hist.all_clients() == small_run.client_ids
    info = hist.round_info(3)
    assert info.lr == SMALL.lr and info.n_samples["client-00"] > info.n_samples["client-01"]
    clients = ["client-04", "client-01"]
    grads = backend.reveal(hist.gradients(backend, 3, clients))
    assert torch.equal(grads.float(), torch.from_numpy(small_run.grads[2][[4, 1]]))
    assert torch.allclose(backend.reveal(hist.norms(backend, 3, clients)), torch.from_numpy(small_run.norms[2][[4, 1]]))
    assert torch.equal(hist.model(4), small_run.models[4])


def test_target_data_carries_two_triggered_copies(small_run: SimulationResult) -> None:
    fed = small_run.federation
    target = fed.client("client-00")
    clean_x, clean_y = fed.clean_target_data["client-00"]
    n = len(clean_y)
    assert target.n_samples == 3 * n
    assert torch.equal(target.y[n:], torch.full((2 * n,), SMALL.target_label))
    assert torch.equal(target.x[n : 2 * n], target.x[2 * n :])
    assert not torch.equal(target.x[n : 2 * n], torch.from_numpy(clean_x))


def test_oracle_reproduces_stored_gradients_and_logs_requests(small_run: SimulationResult) -> None:
    backend = PlainBackend()
    oracle = SimulatedOracle(small_run, unresponsive=frozenset({"client-05"}))
    clients = ("client-01", "client-03", "client-05")
    for i in (1, 3):
        request = GradientRequest(
            small_run.models[i - 1], unlearning_round=i, original_round=i, clients=clients, reason="warmup"
        )
        answers = oracle.exact_gradients(backend, request)
        for cid in clients[:2]:
            assert torch.equal(backend.reveal(answers[cid]).float(), small_run.gradient(i, cid))
        assert answers["client-05"] is None
    # another round's data order gives another gradient at the same model
    other = oracle.exact_gradient(small_run.models[0], "client-01", 2)
    assert not torch.equal(other, small_run.gradient(1, "client-01"))
    assert oracle.participation() == {"client-01": 2, "client-03": 2}
    assert [c.unanswered for c in oracle.calls] == [("client-05",), ("client-05",)]


def test_retrain_reference_excludes_targets_and_is_reproducible(small_run: SimulationResult) -> None:
    models = small_run.retrain_models()
    assert len(models) == SMALL.rounds + 1 and torch.equal(models[0], small_run.models[0])
    assert not torch.equal(models[-1], small_run.models[-1])
    fed = small_run.federation
    oracle = SimulatedOracle(small_run)
    remaining = [c.client_id for c in fed.remaining()]
    n = fed.n_samples
    g = {c: oracle.exact_gradient(models[0], c, 1).double() for c in remaining}
    agg = sum(n[c] * g[c] for c in remaining) / sum(n[c] for c in remaining)
    assert torch.allclose(models[1].double(), models[0].double() - SMALL.lr * agg, atol=1e-6)


def test_simulation_is_deterministic_and_persists(small_run: SimulationResult, tmp_path: Path) -> None:
    path = tmp_path / "history.npz"
    small_run.save(path)
    loaded = SimulationResult.load(path)
    assert loaded.config == small_run.config
    assert all(torch.equal(a, b) for a, b in zip(loaded.models, small_run.models, strict=True))
    assert np.array_equal(loaded.grads, small_run.grads) and np.array_equal(loaded.deltas, small_run.deltas)
    again = simulate(replace(SMALL, rounds=2))
    assert np.array_equal(again.grads, small_run.grads[:2])


def test_dirichlet_federation_and_bad_configs() -> None:
    fed = build_federation(replace(SMALL, partition="dirichlet", dirichlet_beta=0.2))
    sizes = [c.n_samples for c in fed.clients]
    assert len(set(sizes)) > 1
    with pytest.raises(ValueError, match="num_targets"):
        SimulationConfig(dataset="digits", num_clients=3, num_targets=3).resolved()
    with pytest.raises(ValueError, match="unknown dataset"):
        SimulationConfig(dataset="svhn").resolved()
    with pytest.raises(ValueError, match="expects"):
        build_federation(replace(SMALL, architecture="mnist_cnn"))
