"""A Stage I round's clip session, as a party's worker runs it (docs/PRIVACY.md, "Stage I").

With `[privacy] dp = true` round i's public aggregate is

    G_i = reveal_noised( Σ_{j∈S_i} w_j · SecClip(g_j, C) ),   w_j = n_j / Σ_{k∈S_i} n_k,

computed by the same written-once code as Stage II's reveals
(`privacy.distributed.PrivateAggregator`: SecClip, the weighted sum, the distributed
noise with σ = z·C·max_j w_j), on the CrypTen backend over the TLS MPC plane and the dealer
service, exactly as a job's session attempt (`server.workers.join_session.open_session`). Steps:

1. open the party's store read-only; check round i's agreed membership is the one the party
   asked for (its digest) and M_{i−1} is the round's input model;
2. join the session; load this party's shares [g_j] of every member (no communication);
3. clip, aggregate and open with this party's keyed noise (`Stage1Privacy.round_key`), so a
   repeated session of the round opens the same noise;
4. check both parties opened the same G_i; write `aggregate.npy` (temp file, then rename)
   and `costs.json` (time and bytes, online and offline) into the session's folder; report
   the hash of G_i to the party, which derives M_i from it (`server.stage1_clip`).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np

from mpc.crypten_backend import CrypTenBackend
from privacy.distributed import PrivateAggregator
from privacy.settings import DPSettings
from server.stage1_clip import AGGREGATE_FILE, COSTS_FILE, STAGE1_CLIP, aggregate_digest
from server.stage1_dp import Stage1Privacy
from server.store import Store, membership_digest
from server.workers import agree
from server.workers.join_session import open_session
from server.workers.parent_link import ParentLink
from server.workers.process import WorkerSpec

log = logging.getLogger("server.workers.worker")
TASK = STAGE1_CLIP  #: the `WorkerSpec.task` this session module runs (server.workers.worker)


def _members(store: Store, spec: WorkerSpec) -> dict[str, int]:
    """Step 1: the round's agreed members, checked against the digest the party asked for."""
    round_index = spec.base_round + 1
    members = store.round_members(round_index)
    if membership_digest(members, round_index) != spec.parameters["membership_sha256"]:
        raise RuntimeError(f"round {round_index}: the stored membership is not the one of this clip session")
    if store.global_model_hash(spec.base_round) != spec.base_model_hash:
        raise RuntimeError(f"round {round_index}: this party's M_{spec.base_round} is not the round's input model")
    return members


def _clipped_aggregate(backend: CrypTenBackend, store: Store, spec: WorkerSpec, members: dict[str, int]) -> np.ndarray:
    """Steps 2–3: G_i with this party's keyed noise."""
    round_index = spec.base_round + 1
    clients = sorted(members)
    capped = store.round_weights(round_index)  # the cohort's capped weights (unlearning.weight_cap)
    total = float(sum(capped[c] for c in clients))
    rows = [backend.load_shares(store.load_share(round_index, c).gradient) for c in clients]
    settings = DPSettings(**spec.dp)
    aggregator = PrivateAggregator(settings)
    key = Stage1Privacy(Path(spec.data_dir), settings).round_key(round_index, spec.parameters["membership_sha256"])
    with backend.step("stage1 clip"):
        weights = [capped[c] / total for c in clients]
        summed, sensitivity = aggregator.clipped_sum(backend, backend.stack(rows), weights)
        released = aggregator.reveal_sum(
            backend, summed, sensitivity, clients, f"stage1 round {round_index}", noise_key=key
        )
    return released.numpy().astype(np.float64)


def run_session(spec_path: Path, link: ParentLink) -> int:
    """Run the clip session `spec_path` describes (module docstring); 0 on success."""
    spec = WorkerSpec.read(spec_path)
    folder = Path(spec.job_dir)
    store = Store(Path(spec.data_dir), spec.role, readonly=True)
    members = _members(store, spec)
    session = open_session(spec, link)
    try:
        backend = CrypTenBackend(precision_bits=spec.precision_bits, step_check=spec.step_check)
        aggregate = _clipped_aggregate(backend, store, spec, members)
        digest = aggregate_digest(aggregate)
        agree.check_same(backend, digest, f"aggregates of round {spec.base_round + 1}")
    except BaseException:
        session.close(force=True)
        raise
    session.close()
    store.close()
    tmp = folder / "aggregate.tmp.npy"
    np.save(tmp, aggregate, allow_pickle=False)
    tmp.replace(folder / AGGREGATE_FILE)
    (folder / COSTS_FILE).write_text(json.dumps(backend.ledger.to_dict(), sort_keys=True))
    link.send({"kind": "result", "model_hash": digest})
    log.info("round %d: clipped aggregate opened (%s); session closed", spec.base_round + 1, digest[:12])
    return 0
