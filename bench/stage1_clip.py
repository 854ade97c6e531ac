"""Stage I round under distributed DP: the cost of clipping inside 2PC (docs/PRIVACY.md, "Stage I").

Setting: dealer, party0 and party1 as real processes on loopback (`LocalDeployment`, TLS
MPC plane), SDK clients in this process; one round of `CLIENTS` clients over a model of
`PARAMS` parameters (the size of `mnist_mlp`), once with `[privacy] dp = false` (the
aggregate-share exchange) and once with `dp = true` (the round's clip session:
Σ_j w_j·SecClip(g_j, C), opened with both parties' noise). Workers on standby
(`[jobs] standby = "always"`), so the session does not wait for imports.

Reported: the round's wall time from the last acknowledged upload to the committed M_1,
and each party's session costs from its worker (`costs.json`: seconds, online bytes and
rounds between the parties, offline bytes from the dealer).
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.env import stamp, write_result
from harness.local import LocalDeployment

NAME = "stage1_clip"
PARAMS, CLIENTS = 50_890, 10
QUICK_PARAMS, QUICK_CLIENTS = 2_000, 3
CLIP, Z, LR, N = 1.0, 1.0, 0.1, 50


def _round(root: Path, params: int, clients: list[str], dp: bool) -> dict[str, Any]:
    """One round's wall time (last upload → commit) and, with DP, both parties' session costs."""
    privacy = {"dp": True, "clip": CLIP, "noise_multiplier": Z} if dp else {}
    dep = LocalDeployment(
        root,
        clients=clients,
        rounds={"deadline_s": 600.0, "poll_s": 0.05, "max_rounds": 1},
        jobs={"standby": "always", "session_timeout_s": 120.0},
        privacy=privacy,
    )
    dep.start()
    try:
        rng = np.random.default_rng(11)  # benchmark data, not a secret
        with dep.admin() as admin:
            admin.start_training("bench", np.zeros(params, dtype=np.float32), LR)
        for c in clients:  # all registered first: the round closes once every registered client uploaded
            with dep.client(c) as sdk:
                sdk.register()
        for c in clients:
            with dep.client(c) as sdk:
                view = sdk.wait_for_round(0, timeout_s=300)
                sdk.submit(view.round, rng.normal(scale=0.01, size=params) * (1 + 99 * (c == clients[0])), N)
        start = time.perf_counter()
        with dep.admin() as admin:
            while admin.status().latest_committed < 1:
                time.sleep(0.05)
        out: dict[str, Any] = {"round_seconds": time.perf_counter() - start}
        if dp:
            for role in (0, 1):
                (path,) = sorted((dep.data_dir(role) / "stage1-clip").glob("stage1-1.*/costs.json"))
                out[f"party{role}"] = json.loads(path.read_text())["stage1 clip"]
        return out
    finally:
        dep.stop()


def run(quick: bool = False) -> dict[str, Any]:
    params, count = (QUICK_PARAMS, QUICK_CLIENTS) if quick else (PARAMS, CLIENTS)
    clients = [f"client-{k:02d}" for k in range(count)]
    meta = stamp({"params": params, "clients": count, "clip": CLIP, "noise_multiplier": Z})
    with tempfile.TemporaryDirectory(prefix="bench-stage1-clip-") as tmp:
        figures = {
            "dp_off": _round(Path(tmp) / "off", params, clients, dp=False),
            "dp_on": _round(Path(tmp) / "on", params, clients, dp=True),
        }
    write_result(NAME + ("_quick" if quick else ""), meta, figures)
    return figures
