"""Where a Starfish client's time goes in one Flower round, without Ray and without training.

`StarfishMod` is called the way Flower's simulation engine calls it in one actor: one TRAIN
message after another, each for a different simulated node (its own client id and
token), in one process, against party0 and party1 as real processes (TLS, durable stores,
a round opened on request). The app's train function is a stub returning the model minus
a small step, so what is measured is the mod: the identity, the connection to the
parties, registration, the round check (state of both parties + the model hash), the
pseudo-gradient, the sharing, the outbox write (fsync), the two uploads and the close;
and the CPU seconds each party spent per client (TLS, checks, durable writes, sums).

`profile(clients)` returns the wall seconds per client and, from cProfile, the cumulative
seconds per client of each step (`STEPS`). `python -m bench.flower_mod_profile [N]` prints it.
"""

from __future__ import annotations

import cProfile
import json
import pstats
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

MODEL_PARAMS = 50_890  #: mnist_mlp
ARCH = "mnist_mlp"
#: (file suffix, function) of the steps a client takes per round through the mod
STEPS = (
    ("starfish_flower/parties.py", "resolve"),
    ("starfish_flower/mod.py", "_client"),
    ("client_sdk/client.py", "__init__"),
    ("client_sdk/client.py", "register"),
    ("client_sdk/client.py", "round_state"),
    ("proto/wire.py", "model_hash"),
    ("starfish_flower/mod.py", "_update"),
    ("client_sdk/client.py", "submit"),
    ("client_sdk/sharing.py", "make_sharing"),
    ("client_sdk/outbox.py", "save"),
    ("client_sdk/client.py", "_deliver"),
    ("client_sdk/client.py", "_settle"),
    ("client_sdk/client.py", "close"),
)


def _messages(clients: int, round_index: int, lr: float):
    """(message, context) per simulated node, as a SuperNode hands them to the ClientApp."""
    from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MessageType, Metadata, RecordDict

    from starfish_flower import keys

    model = ArrayRecord({"w": Array(np.zeros(MODEL_PARAMS, np.float32))})
    config = ConfigRecord({keys.ROUND: round_index, keys.LR: lr, keys.ARCH: ARCH})
    for node in range(clients):
        metadata = Metadata(1, f"m{node}", 0, node + 1, "", "", time.time(), 3600.0, MessageType.TRAIN)
        context = Context(
            run_id=1, node_id=node + 1, node_config={"partition-id": node}, state=RecordDict(), run_config={}
        )
        yield Message(content=RecordDict({"arrays": model, "config": config}), metadata=metadata), context


def _train(msg, context):
    """The app's train function, stubbed: one small SGD-like step (benchmark data, not a secret)."""
    from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict

    w = msg.content["arrays"]["w"].numpy()
    step = np.random.default_rng(context.node_id).normal(0, 1e-3, w.shape).astype(np.float32)
    content = RecordDict({"arrays": ArrayRecord({"w": Array(w - step)}), "metrics": MetricRecord({"num-examples": 60})})
    return Message(content, reply_to=msg)


def profile(clients: int = 100) -> dict[str, Any]:
    """Seconds per client of one round through `StarfishMod`, total and by step (see module doc)."""
    from bench.env import process_cpu_seconds
    from harness.local import LocalDeployment
    from starfish_flower import Parties, StarfishMod, identity_from_credentials

    ids = [f"client{i}" for i in range(clients)]
    with tempfile.TemporaryDirectory() as tmp:
        dep = LocalDeployment(Path(tmp) / "dep", clients=ids, rounds={"opening": "on_request", "deadline_s": 600.0})
        dep.start()
        try:
            with dep.admin() as admin:
                admin.start_training(ARCH, np.zeros(MODEL_PARAMS, np.float32), 1.0)
                admin.open_round(1)
            mod = StarfishMod(
                Parties(dep.address(0), dep.address(1), dep.ca_cert), identity_from_credentials(dep.cred_path)
            )
            profiler = cProfile.Profile()
            cpu = [process_cpu_seconds(dep.procs[r].pid) for r in (0, 1)]
            started = time.perf_counter()
            profiler.enable()
            replies = [mod(msg, ctx, _train) for msg, ctx in _messages(clients, 1, 1.0)]
            profiler.disable()
            wall = time.perf_counter() - started
            cpu = [process_cpu_seconds(dep.procs[r].pid) - cpu[r] for r in (0, 1)]
        finally:
            dep.stop()
    failed = [r.error.reason for r in replies if r.has_error()]
    if failed:
        raise RuntimeError(f"{len(failed)} of {clients} uploads failed: {failed[0]}")
    stats = pstats.Stats(profiler).stats  # (file, line, function) → (calls, ncalls, tottime, cumtime, callers)
    steps = {
        f"{Path(file).stem}.{name}": round(ct / clients, 4)
        for (file, _, name), (_, _, _, ct, _) in stats.items()
        if any(file.endswith(f) and name == n for f, n in STEPS)
    }
    return {
        "clients": clients,
        "seconds_per_client": round(wall / clients, 4),
        "by_step": steps,
        "party_cpu_s_per_client": {f"party{r}": round(cpu[r] / clients, 4) for r in (0, 1)},
    }


if __name__ == "__main__":
    print(json.dumps(profile(int(sys.argv[1]) if len(sys.argv) > 1 else 100), indent=1))
