"""`ServiceOracle`: warm-up, correction and recovery gradients from real clients (docs/JOBS.md §4).

For a `GradientRequest` (model M̂_t, unlearning round t, original round r, clients):

1. both workers check they hold the same M̂_t (hash) and adopt party0's deadline;
2. each asks its party process to store M̂_t and post one task per client ("compute your
   exact gradient at M̂_t, hash h, for job J, round t, data order of round r"); task ids
   are derived from (job, t, reason, h, agreed deadline, client), so both parties post the
   same tasks, and a resumed session posts fresh ones (a task half-posted by a crashed
   attempt can never be announced differently by the two parties);
3. each worker waits until its own store holds every answer or the deadline passes;
4. the parties AND their bitmasks of answers held (public): a client counts as answered
   only if both parties hold its shares, so both load the same answers. A client that
   did not answer in time gets None and the algorithm keeps its estimate;
5. with `[validation]` on, the answers held by both are checked in 2PC by the party
   processes (party0 leads, server.upload_check) before any is loaded: a refused answer is
   treated exactly like a missing one, and named in the job report and JobStatus.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch

from mpc.backend import Backend, Secret
from mpc.plane.dealer_client import DealerError
from proto.starfish.v1 import client_pb2
from proto.wire import model_hash
from server.store import Store
from server.workers import agree
from unlearning.history import GradientOracle, GradientRequest
from unlearning.strategy import UnlearningError

log = logging.getLogger(__name__)
#: a request's reason → the task kind a client sees; FedRecover's final tuning and abnormality
#: fixing ask, as a correction does, for the exact gradient at M̂ with a stored round's data order
TASK_KINDS = {
    "warmup": client_pb2.TASK_KIND_WARMUP,
    "correction": client_pb2.TASK_KIND_CORRECTION,
    "recovery": client_pb2.TASK_KIND_RECOVERY,
    "final_tuning": client_pb2.TASK_KIND_CORRECTION,
    "abnormality": client_pb2.TASK_KIND_CORRECTION,
}


def task_id(job_id: str, t: int, reason: str, digest: str, deadline_ms: int, client: str) -> str:
    """Task id both parties derive alike (letters, digits, `-`, `_`, `.`: safe as a file name)."""
    return f"{job_id}-t{t}-{reason}-{digest[:12]}-{deadline_ms:x}-{client}"


class ServiceOracle(GradientOracle):
    """Gradient oracle of a job worker; `link` is the worker's pipe to its party process."""

    def __init__(
        self, store: Store, link, job_id: str, arch: str, models_dir: Path, task_timeout_s: float, task_poll_s: float
    ):
        self.store = store
        self.link = link
        self.job_id = job_id
        self.arch = arch
        self.models_dir = models_dir
        self.models_dir.mkdir(parents=True, exist_ok=True)
        self.task_timeout_s = task_timeout_s
        self.task_poll_s = task_poll_s

    def exact_gradients(self, backend: Backend, request: GradientRequest) -> Mapping[str, Secret | None]:
        if request.reason not in TASK_KINDS or request.local_epochs is not None or request.fresh_order:
            raise UnlearningError(
                f"the client task protocol carries warm-up, correction and recovery tasks with the data order of a "
                f"stored round only; cannot ask for {request.reason!r} (local_epochs={request.local_epochs}, "
                f"fresh_order={request.fresh_order})"
            )
        clients = list(request.clients)
        model = request.model.detach().to(torch.float32).numpy()
        digest = model_hash(self.arch, model)
        agree.check_same(backend, digest, f"model M̂_{request.unlearning_round}")
        deadline_ms = agree.leader_value(backend, int((time.time() + self.task_timeout_s) * 1000))
        deadline = deadline_ms / 1000.0
        ids = {
            c: task_id(self.job_id, request.unlearning_round, request.reason, digest, deadline_ms, c) for c in clients
        }
        model_file = self.models_dir / f"{digest}.npy"
        if not model_file.exists():
            tmp = model_file.with_suffix(".tmp.npy")
            np.save(tmp, model, allow_pickle=False)
            tmp.replace(model_file)
        self.link.request(
            {
                "kind": "post_tasks",
                "model_file": model_file.name,
                "model_hash": digest,
                "deadline": deadline,
                "task_kind": int(TASK_KINDS[request.reason]),
                "unlearning_round": request.unlearning_round,
                "original_round": request.original_round,
                "tasks": ids,
            }
        )
        held = self._wait(ids, deadline)
        agreed = agree.both_true(backend, [c in held for c in clients])
        agreed = self._valid(backend, request, {c: ids[c] for c, ok in zip(clients, agreed, strict=True) if ok}, agreed)
        out: dict[str, Secret | None] = {}
        for client, ok in zip(clients, agreed, strict=True):
            bundle = self.store.load_task_share(ids[client]) if ok else None
            out[client] = None if bundle is None else backend.load_shares(bundle.gradient)
        missing = [c for c, ok in zip(clients, agreed, strict=True) if not ok]
        if missing:
            log.warning(
                "round %d %s: no valid answer from %s before the deadline; estimates kept",
                request.unlearning_round,
                request.reason,
                missing,
            )
        return out

    def _valid(
        self, backend: Backend, request: GradientRequest, answered: dict[str, str], agreed: list[bool]
    ) -> list[bool]:
        """Step 5: the answers both parties hold, checked in 2PC by the party processes
        (server.upload_check); a refused answer counts as missing. The parties AND their
        verdict bits again, so both load the same answers whatever happened."""
        if not answered:
            return agreed
        reply = self.link.request(
            {
                "kind": "check_tasks",
                "tasks": answered,
                "unlearning_round": request.unlearning_round,
                "task": request.reason,
            }
        )
        failed = reply.get("failed")
        if failed:  # the batch could not run: the attempt fails, blamed on the process that failed
            error = f"the answer check of round {request.unlearning_round} failed: {failed.get('error', '')}"
            raise DealerError(error) if failed.get("process") == "dealer" else UnlearningError(error)
        refused = dict(reply.get("refused") or {})
        t = request.unlearning_round
        for client, reason in sorted(refused.items()):
            log.warning("round %d %s: answer of %s refused: %s", t, request.reason, client, reason)
        valid = [ok and c not in refused for c, ok in zip(request.clients, agreed, strict=True)]
        return agree.both_true(backend, valid)

    def _wait(self, ids: dict[str, str], deadline: float) -> set[str]:
        """Clients whose answer this party holds, waiting until all or the deadline."""
        held: set[str] = set()
        while True:
            for client, tid in ids.items():
                if client not in held and self.store.load_task_share(tid) is not None:
                    held.add(client)
            if len(held) == len(ids) or time.time() >= deadline:
                return held
            time.sleep(self.task_poll_s)
