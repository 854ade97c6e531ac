"""Stage I under distributed DP clips inside 2PC: a client that skips clipping is bounded.

Real deployment (dealer and both parties as processes on free ports, TLS MPC plane). Three
clients with n_j = 10 upload to round 1 with `[privacy] dp = true`, C = 1: a and b honest
gradients of norm 0.5, c an unclipped one of norm 50·C (no client-side clipping). The
round closes by a clip session (server.stage1_clip), so the published

    G_1 = (M_0 − M_1)/η = Σ_j w_j·g_j·min(1, C/‖g_j‖) + n_0 + n_1

where n_p is party p's draw keyed by HMAC(its noise key, "stage1|1|membership digest")
(server.stage1_dp): the test recomputes both draws from the parties' key files and finds
G_1 to fixed-point precision, so c moves G_1 by at most w_c·C (unclipped it would be 50·C/3),
and a retried session can only open the same noise.

The dealer is down when the round closes: the first clip session fails, no candidate model
is stored on either party and nothing commits; the round is retried and commits once the
dealer is back. Both sessions are in each party's release log, which counts the round once.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from pathlib import Path

import numpy as np
import pytest

from harness.local import LocalDeployment
from mpc.dp_noise import keyed_gaussian
from privacy.settings import DPSettings
from server.stage1_dp import Stage1Privacy
from server.store import Store

pytestmark = pytest.mark.timeout(600)
CLIENTS = ["a", "b", "c"]
M = 64
LR = 0.5
N = 10
CLIP, Z = 1.0, 0.5
SETTINGS = DPSettings(clip=CLIP, noise_multiplier=Z, delta=1e-5)


def _gradient(client: str) -> np.ndarray:
    g = np.random.default_rng(200 + CLIENTS.index(client)).normal(size=M)  # test data, not a secret
    return g / np.linalg.norm(g) * (50.0 * CLIP if client == "c" else 0.5)


def _clipped(g: np.ndarray) -> np.ndarray:
    return g * min(1.0, CLIP / float(np.linalg.norm(g)))


def _party_noise(dep: LocalDeployment, role: int, digest: str) -> np.ndarray:
    key = (dep.data_dir(role) / "dp" / "noise.key").read_bytes()
    round_key = hmac.new(key, f"stage1|1|{digest}".encode(), hashlib.sha256).digest()
    return keyed_gaussian(round_key, (M,), Z * CLIP * (1 / 3)).numpy()


def _wait_for(what: str, done, timeout_s: float = 300.0):
    end = time.time() + timeout_s
    while time.time() < end:
        value = done()
        if value:
            return value
        time.sleep(0.2)
    raise TimeoutError(what)


def _upload(dep: LocalDeployment) -> None:
    for c in CLIENTS:
        with dep.client(c) as sdk:
            sdk.register()
    for c in CLIENTS:
        with dep.client(c) as sdk:
            view = sdk.wait_for_round(0, timeout_s=90)
            sdk.submit(view.round, _gradient(c), N, model_hash=view.model_hash)


def _log(dep: LocalDeployment, role: int) -> str:
    return (dep.root / "logs" / f"party{role}.log").read_text(errors="replace")


def test_an_unclipped_upload_is_clipped_by_the_parties_and_a_failed_session_commits_nothing(tmp_path: Path):
    dep = LocalDeployment(
        tmp_path / "dep",
        clients=CLIENTS,
        rounds={"deadline_s": 60.0, "poll_s": 0.05, "max_rounds": 1, "peer_retry_s": 0.5},
        jobs={"session_timeout_s": 20.0, "standby": "always"},
        privacy={"dp": True, "clip": CLIP, "noise_multiplier": Z},
        # the dealer outage must reach the clip session: with the upload check on, the round stops
        # before it (tests/integration/test_validated_uploads.py shows that case)
        validation={"enabled": False},
    )
    dep.start()
    try:
        dep.stop_dealer()
        with dep.admin() as admin:
            admin.start_training("toy", np.zeros(M, dtype=np.float32), LR)
        _upload(dep)
        _wait_for("a failed clip session", lambda: "clip session failed" in _log(dep, 0))
        for role in (0, 1):
            store = Store(dep.data_dir(role), role, readonly=True)
            rec = store.round_record(1)
            assert store.latest_committed() == 0 and rec.model_out_hash is None, rec  # no candidate M_1
        dep.start_dealer()
        with dep.admin() as admin:
            _wait_for("round 1 committed", lambda: admin.status().latest_committed >= 1)
            published = (admin.global_model(0)[1].astype(np.float64) - admin.global_model(1)[1]) / LR
        digest = Store(dep.data_dir(0), 0, readonly=True).round_record(1).membership_sha256
        noise = _party_noise(dep, 0, digest) + _party_noise(dep, 1, digest)
        expected = sum(_clipped(_gradient(c)) for c in CLIENTS) / 3 + noise
        assert np.max(np.abs(published - expected)) < 3e-3  # exactly the clipped sum and the two keyed draws
        honest = (_gradient("a") + _gradient("b")) / 3 + noise
        assert np.linalg.norm(published - honest) <= CLIP / 3 * (1 + 1e-3)  # c moves G_1 by at most w_c·C
        unclipped = sum(_gradient(c) for c in CLIENTS) / 3
        assert np.linalg.norm(unclipped - honest) > 16.0  # what c would have moved it by
        for role in (0, 1):
            lines = (dep.data_dir(role) / "dp" / "releases.jsonl").read_text().splitlines()
            assert len(lines) >= 2  # the failed session and the one that committed, each logged first
            releases = Stage1Privacy(dep.data_dir(role), SETTINGS).releases()
            assert [(r.label, r.members) for r in releases] == [("stage1 round 1", tuple(CLIENTS))]
        costs = re.findall(r"clip session \S+: .*", _log(dep, 0))
        print("\n".join(costs))
        assert costs
    finally:
        dep.stop()
