"""Distributed DP end to end (docs/PRIVACY.md, "Differential privacy"): real parties, `[privacy] dp = true`.

* Stage I: every committed model carries the two parties' noise — the residual
  (M_(i−1) − M_i)/η − Σ_j w_j·clip(g_j, C), with w_j the cohort's capped weights (here
  n_j/Σ n_k: k = 3 caps nobody), is N(0, 2σ²) per coordinate with σ = z·C·max_j w_j, one
  independent draw per party, round and coordinate (ROUNDS·DIM_DP of them) — and each party
  logged every noised round, durably, with its members; the party noise key is private to
  its owner (mode 0600).
* Stage II: a Starfish job succeeds; its report's "privacy" section gives (ε, δ) per
  client and for the job by the RDP accountant over the Stage I rounds and the job's
  releases (the target in none of them), and JobStatus carries the same ε.
"""

from __future__ import annotations

import json
import stat

import numpy as np
import pytest
from scipy.stats import chi2

from privacy.accountant import privacy_report
from privacy.release_log import Release
from proto.starfish.v1 import admin_pb2
from unlearning.weight_cap import capped_weights

from helpers.stage2_fixtures import LR, LogReg, TrainedService

CLIENTS = [f"c{i}" for i in range(5)]
ROUNDS = 4
#: parameters of the model: ROUNDS·DIM_DP = 512 noise draws, enough for a band at failure
#: probability 10⁻⁶ that a missing party's noise (std ×1/√2) or doubled variance leaves
DIM_DP = 128
Z, CLIP, DELTA, MIN_COHORT = 0.5, 1.0, 1e-5, 3
FAILURE = 1e-6  #: probability that the noise test fails with both parties' noise as specified


def _clipped(g: np.ndarray) -> np.ndarray:
    return g * min(1.0, CLIP / float(np.linalg.norm(g)))


@pytest.fixture(scope="module")
def dp_service(tmp_path_factory):
    svc = TrainedService.create(
        tmp_path_factory.mktemp("dp"),
        CLIENTS,
        rounds=ROUNDS,
        jobs={"task_timeout_s": 2.5},
        unlearning={"parameters": {"beta": 0.25}},
        privacy={"dp": True, "clip": CLIP, "noise_multiplier": Z, "delta": DELTA, "min_cohort": MIN_COHORT},
        problem=LogReg.make(CLIENTS, dim=DIM_DP),
    )
    yield svc
    svc.stop()


@pytest.mark.timeout(300)
def test_stage1_models_carry_both_parties_noise_and_rounds_are_logged(dp_service):
    problem = dp_service.problem
    with dp_service.dep.client("c1") as client:
        models = [client.fetch_model(i).params.astype(np.float64) for i in range(ROUNDS + 1)]
    capped = capped_weights({c: problem.n(c) for c in CLIENTS}, {}, MIN_COHORT)
    assert capped is not None
    w = {c: capped[c] / sum(capped.values()) for c in CLIENTS}
    residuals = np.concatenate(
        [
            (models[i - 1] - models[i]) / LR - sum(w[c] * _clipped(problem.gradient(c, models[i - 1])) for c in CLIENTS)
            for i in range(1, ROUNDS + 1)
        ]
    )
    # each party's N(0, σ²): the residuals are `draws` independent N(0, 2σ²), so with the
    # mean known (0) draws·mean(r²)/(2σ²) is χ² with `draws` degrees of freedom
    draws, sigma = residuals.size, Z * CLIP * max(w.values())
    assert draws == ROUNDS * DIM_DP
    ratio = float(np.mean(residuals**2)) / (2 * sigma**2)
    low, high = chi2.ppf(FAILURE / 2, draws) / draws, chi2.isf(FAILURE / 2, draws) / draws
    # the band's power: one party's noise alone (ratio χ²/(2·draws)) or doubled variance passes with p < FAILURE
    assert chi2.sf(2 * low * draws, draws) < FAILURE and chi2.cdf(high * draws / 2, draws) < FAILURE
    assert low < ratio < high, (ratio, low, high)
    for role in (0, 1):
        folder = dp_service.dep.data_dir(role) / "dp"
        lines = [json.loads(x) for x in (folder / "releases.jsonl").read_text().splitlines()]
        assert sorted({e["round"] for e in lines}) == list(range(1, ROUNDS + 1))
        assert all(e["members"] == sorted(CLIENTS) and e["noise_multiplier"] == Z for e in lines)
        assert stat.S_IMODE((folder / "noise.key").stat().st_mode) == 0o600
    keys = [(dp_service.dep.data_dir(r) / "dp" / "noise.key").read_bytes() for r in (0, 1)]
    assert keys[0] != keys[1]


@pytest.mark.timeout(400)
def test_job_reports_epsilon_per_client_and_in_job_status(dp_service):
    with dp_service.dep.admin() as admin:
        job_id = admin.unlearn(["c0"])
        done = admin.wait_job(job_id, 300)
        assert done.state == admin_pb2.JOB_STATE_SUCCEEDED, done.error
        report = json.loads(admin.job_report(job_id).report_json)
        status = admin.job_status(job_id)
    privacy = report["privacy"]
    assert privacy["dp"] and privacy["delta"] == DELTA and privacy["accountant"] == "opacus RDP"
    stage2 = [r for r in privacy["releases"] if not r["label"].startswith("stage1")]
    assert len(privacy["releases"]) == ROUNDS + len(stage2) and stage2
    assert all(r["cohort"] <= len(CLIENTS) - 1 for r in stage2)  # the target is in no Stage II aggregate
    # the same accounting from the releases: c0 only in Stage I, the others in both stages
    stage1 = [Release(f"stage1 round {i}", Z, tuple(CLIENTS)) for i in range(1, ROUNDS + 1)]
    target_only = privacy_report(stage1, DELTA)["epsilon"]
    assert privacy["per_client"]["c0"] == pytest.approx(target_only)
    assert all(privacy["per_client"][c] > target_only for c in CLIENTS[1:])
    assert privacy["epsilon"] == pytest.approx(max(privacy["per_client"].values()))
    assert status.privacy.dp and status.privacy.epsilon == pytest.approx(privacy["epsilon"])
    assert dict(status.privacy.client_epsilon) == pytest.approx(privacy["per_client"])
