"""The simulator's FedADP upload mechanism and the oracle's fresh-order / epoch requests."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from evaluation.dataset_probe import DatasetProbe
from evaluation.simulated_oracle import SimulatedOracle
from evaluation.simulator import SimulationConfig, SimulationResult, simulate
from evaluation.training import fedavg
from mpc.plain_backend import PlainBackend
from privacy.adaptive import next_budget, noise_std
from unlearning.history import GradientRequest

from helpers.eval_federations import SMALL

#: the small federation with privatized uploads; ε large enough that the model still learns
PRIVATE = replace(SMALL, upload_dp=True, dp_clip_norm=2.0, dp_epsilon_0=20.0, dp_epsilon_min=20.0, dp_epsilon_max=60.0)


@pytest.fixture(scope="module")
def private_run() -> SimulationResult:
    return simulate(PRIVATE)


def test_budgets_follow_eq4_along_the_probe_loss_of_the_stored_models(private_run: SimulationResult) -> None:
    privacy = private_run.privacy
    assert privacy is not None and privacy.mechanism == "gaussian" and privacy.clip_norm == 2.0
    probe = DatasetProbe(private_run.config.architecture, private_run.federation.dataset)
    losses = [probe.loss(m) for m in private_run.models]
    expected = [20.0]
    for i in range(1, PRIVATE.rounds):
        expected.append(next_budget(expected[-1], losses[i - 1], losses[i], 20.0, 60.0))
    assert privacy.budgets == pytest.approx(expected)
    assert privacy.noise_std == pytest.approx([noise_std(2.0, 1e-5, e) for e in expected])


def test_stored_uploads_are_clipped_gradients_plus_noise_of_the_declared_std(private_run: SimulationResult) -> None:
    oracle = SimulatedOracle(private_run)
    for i in (1, PRIVATE.rounds):
        for cid in private_run.client_ids:
            clean = oracle.exact_gradient(private_run.models[i - 1], cid, i).double()
            clipped = clean / max(1.0, float(clean.norm()) / PRIVATE.dp_clip_norm)
            noise = private_run.gradient(i, cid).double() - clipped
            assert float(noise.mean()) == pytest.approx(0.0, abs=5 * private_run.privacy.noise_std[i - 1] / 49)
            assert float(noise.std()) == pytest.approx(private_run.privacy.noise_std[i - 1], rel=0.06)
            assert private_run.norms[i - 1, private_run.client_ids.index(cid)] == pytest.approx(
                float(private_run.gradient(i, cid).double().norm()), rel=1e-6
            )


def test_global_models_aggregate_the_privatized_uploads(private_run: SimulationResult) -> None:
    n = private_run.federation.n_samples
    for i in range(1, PRIVATE.rounds + 1):
        uploads = {c: private_run.gradient(i, c) for c in private_run.client_ids}
        expected = private_run.models[i - 1].double() - PRIVATE.lr * fedavg(uploads, n)
        torch.testing.assert_close(private_run.models[i].double(), expected, atol=1e-6, rtol=0)


def test_history_declares_the_mechanism_and_survives_save_and_load(
    private_run: SimulationResult, small_run: SimulationResult, tmp_path: Path
) -> None:
    assert private_run.history(PlainBackend()).upload_privacy() == private_run.privacy
    assert small_run.privacy is None and small_run.history(PlainBackend()).upload_privacy() is None
    path = tmp_path / "private.npz"
    private_run.save(path)
    assert SimulationResult.load(path).privacy == private_run.privacy
    noisy_noise = simulate(replace(PRIVATE, dp_noise_seed=1))
    assert not torch.equal(noisy_noise.models[1], private_run.models[1])


def test_private_retrain_uses_the_mechanism_and_clean_history_refuses_it(
    private_run: SimulationResult, small_run: SimulationResult
) -> None:
    private = private_run.private_retrain_models()
    clean = private_run.retrain_models()
    assert len(private) == PRIVATE.rounds + 1 and torch.equal(private[0], clean[0])
    assert not torch.allclose(private[-1], clean[-1], atol=1e-3)
    with pytest.raises(ValueError, match="without upload privacy"):
        small_run.private_retrain_models()


def test_bad_mechanism_settings_are_refused() -> None:
    for bad in ({"dp_clip_norm": 0.0}, {"dp_delta": 1.0}, {"dp_epsilon_0": 100.0}, {"dp_epsilon_min": 0.0}):
        with pytest.raises(ValueError):
            replace(PRIVATE, **bad).resolved()
    replace(SMALL, dp_clip_norm=0.0).resolved()  # ignored without upload_dp


def test_fresh_order_and_local_epochs_change_the_answer_reproducibly(small_run: SimulationResult) -> None:
    oracle = SimulatedOracle(small_run)
    model, cid = small_run.models[2], "client-02"

    def ask(**fields: object) -> torch.Tensor:
        request = GradientRequest(model, 5, 3, (cid,), "recovery", **fields)  # type: ignore[arg-type]
        return oracle.answer(request, cid)

    stored_order = ask()
    assert torch.equal(stored_order, small_run.gradient(3, cid))
    fresh = ask(fresh_order=True)
    assert not torch.equal(fresh, stored_order) and torch.equal(fresh, ask(fresh_order=True))
    later = GradientRequest(model, 6, 3, (cid,), "recovery", fresh_order=True)
    assert not torch.equal(oracle.answer(later, cid), fresh)  # each unlearning round draws its own order
    assert torch.equal(ask(local_epochs=1), stored_order)  # the federation trains one epoch
    two = ask(local_epochs=2)
    assert float((two - stored_order).norm()) > 0.1 * float(stored_order.norm())
    with pytest.raises(ValueError, match="local_epochs"):
        GradientRequest(model, 1, 1, (cid,), "recovery", local_epochs=0)


def test_config_without_privacy_fields_still_loads() -> None:
    legacy = {k: v for k, v in SimulationConfig().__dict__.items() if not k.startswith(("dp_", "upload_dp"))}
    assert SimulationConfig(**legacy).upload_dp is False
