"""Evaluation tasks of a succeeded job on one party (docs/JOBS.md §7, "Federated evaluation"):
posting them, reading the answers this party holds, the dealer session of the count check
and the cohort rule of the reveal. Both parties use this module; party0 leads
(server.jobs.evaluation), party1 follows (server.jobs.evaluation_peer).

A task asks one remaining client to score M̂ (global model T + 1, the task's model) and M_T
(global model T, `original_round`) on its own held-out data, and the operator's probe if one is
configured; it answers with its share of the counts (mpc.eval_counts), stored like any task
answer (`Store.put_task_upload`: durable before the acknowledgement; erased with its client).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import numpy as np

from mpc.eval_counts import answer_words
from proto.starfish.v1 import client_pb2
from server.config import PartyConfig
from server.party_state import PartyState
from server.store import Store, StoreError, TaskRecord
from unlearning.weight_cap import principal_count

KIND = client_pb2.TASK_KIND_EVALUATE
PENDING, RUNNING, REVEALED = "pending", "running", "revealed"
TOO_FEW, FAILED, NOT_DONE, OFF = "not_enough_evaluators", "failed", "not_done", "off"


def task_id(job_id: str, client: str, deadline: float) -> str:
    """The evaluation task of `client` for job `job_id`: the same id on both parties."""
    digest = hashlib.sha256(f"{job_id}|evaluate|{client}|{deadline:.3f}".encode()).hexdigest()[:24]
    return f"eval-{digest}"


def post(state: PartyState, job_id: str, tasks: Mapping[str, str], model_hash: str, base: int, deadline: float) -> None:
    """Post one evaluation task per client (client → task id) on this party: M̂ = `model_hash`
    (global model base + 1, which this party must hold), M_T = global model `base`."""
    if state.store.global_model_hash(base + 1) != model_hash:
        raise ValueError(f"party{state.role}'s global model {base + 1} is not {model_hash[:12]}")
    for client, tid in sorted(tasks.items()):
        state.post_task(TaskRecord(tid, client, job_id, KIND, base + 1, base, model_hash, deadline))


def verified(store: Store, job_id: str, tasks: Mapping[str, str]) -> dict[str, str]:
    """client → task id of `tasks` after checking each is an evaluation task of `job_id` for
    that client in this party's own store (ValueError naming the first that is not)."""
    for client, tid in tasks.items():
        record = store.task(tid)
        if record is None or (record.client, record.job_id, record.kind) != (client, job_id, KIND):
            raise ValueError(f"{tid!r} is not an evaluation task of job {job_id} for {client!r} here")
    return dict(tasks)


def held(store: Store, tasks: Mapping[str, str]) -> list[str]:
    """The clients (of client → task id) whose answer this party holds, sorted."""
    return sorted(c for c, t in tasks.items() if store.load_task_share(t) is not None)


def shares(store: Store, tasks: Mapping[str, str], clients: list[str], cfg: PartyConfig) -> np.ndarray:
    """This party's answer shares of `clients`, one row each (n, 6 + 10·B). An answer of the
    wrong length was refused when it arrived, so every stored one has the right length."""
    words = answer_words(cfg.evaluation.max_eval_samples)
    rows = np.zeros((len(clients), words), dtype=np.int64)
    for i, client in enumerate(clients):
        bundle = store.load_task_share(tasks[client])
        if bundle is None or bundle.gradient.size != words:
            raise StoreError(f"party{cfg.role} holds no evaluation answer of {client!r} of {words} words")
        rows[i] = bundle.gradient.reshape(-1)
    return rows


def principals(cfg: PartyConfig, accepted: list[str]) -> int:
    """The distinct principals of the accepted evaluators (clients of one principal count once)."""
    return principal_count(dict.fromkeys(accepted, 1), cfg.principals)


def cohort_refusal(cfg: PartyConfig, accepted: list[str]) -> str | None:
    """The cohort rule of the reveal (server.cohort): the accepted evaluators must be at least
    k = `[privacy] min_cohort` principals (clients of one principal count once). None: met."""
    k = cfg.privacy.min_cohort
    count = principals(cfg, accepted)
    if count >= k:
        return None
    return (
        f"not enough evaluators: {count} accepted answer(s) from distinct principals, fewer than the "
        f"minimum cohort {k} ([privacy] min_cohort); nothing was revealed"
    )


def settings_refusal(cfg: PartyConfig, probe: str, max_eval_samples: int) -> str | None:
    """party1's check that party0 asks with this party's own `[evaluation]` settings."""
    mine = cfg.evaluation
    if not mine.enabled or not cfg.jobs.dealer:
        return f"party{cfg.role} runs no federated evaluation ([evaluation] enabled = false or no dealer)"
    if (probe, max_eval_samples) != (mine.probe, mine.max_eval_samples):
        return (
            f"party{cfg.role}'s [evaluation] settings differ: probe {mine.probe!r}, max_eval_samples "
            f"{mine.max_eval_samples} (asked: {probe!r}, {max_eval_samples})"
        )
    return None
