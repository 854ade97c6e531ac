"""One session attempt of a job, as a party's worker runs it (docs/JOBS.md, sections 2–5).

1. open the party's store read-only and the MPC session `<job id>.<attempt>` on the TLS
   plane: party0 listens on its configured address and tells its party the port (which
   party0 announces in StartJob), party1 connects there; both join the session at the
   dealer service and report which dealer (identity, certificate fingerprint) serves it;
2. agree with the other worker on the newest checkpoint both hold (0 = start) and check
   both hold the same public state there; load this party's shares from it;
3. run the strategy on `CrypTenBackend` over `StoreHistory` (this party's stored shares,
   loaded with no communication) with `ServiceOracle` (tasks through the client SDK),
   checkpointing after every unlearning round (and returning the round's freed heap to
   the OS, `server.jobs.heap`);
4. check both parties hold the same unlearned model, write `result-model.npy` and
   `worker-report.json` into the job directory, report the model hash to the party.

Imported by the worker after it set up its pipe (this module loads torch and CrypTen).
"""

from __future__ import annotations

import json
import logging
import resource
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mpc.costs import CostLedger, StepCost
from mpc.crypten_backend import CrypTenBackend
from privacy.distributed import PrivateAggregator
from privacy.release_log import Release
from privacy.settings import DPSettings
from proto.wire import model_hash
from server.jobs import heap
from server.jobs.checkpoints import CheckpointDir, CheckpointError
from server.jobs.oracle import ServiceOracle
from server.jobs.store_history import StoreHistory
from server.jobs.validation import parse_canonical
from server.store import Store
from server.workers import agree
from server.workers.join_session import open_session
from server.workers.parent_link import ParentLink
from server.workers.process import WorkerSpec
from unlearning import registry
from unlearning.strategy import Progress, ResumableState, Strategy, UnlearnContext, UnlearnResult

log = logging.getLogger("server.workers.worker")
TASK = "unlearn"  #: the `WorkerSpec.task` this session module runs (server.workers.worker)

# A standby worker imports this module before it is handed a session: Starfish's own
# strategy (the paper's algorithm) loads now rather than in the session.
registry.strategy_class("starfish")


def ledger_from_dict(data: dict[str, Any]) -> CostLedger:
    """A cost ledger from its JSON form (`CostLedger.to_dict`)."""
    return CostLedger(steps={name: StepCost(**cost) for name, cost in data.items()})


class JobAttempt:
    """The worker's part of one session attempt (module docstring)."""

    def __init__(self, spec: WorkerSpec, link: ParentLink) -> None:
        self.spec = spec
        self.link = link
        self.job_dir = Path(spec.job_dir)
        self.store = Store(Path(spec.data_dir), spec.role, readonly=True)
        if self.store.global_model_hash(spec.base_round) != spec.base_model_hash:
            raise RuntimeError(f"this party's M_{spec.base_round} is not the job's base model")
        self.strategy: type[Strategy] = registry.strategy_class(spec.strategy)
        #: the job's canonical parameters as its party stored them, typed (never re-read from a request)
        self.params = parse_canonical(spec.targets, spec.strategy, json.dumps(spec.parameters, sort_keys=True)).params
        self.checkpoints = CheckpointDir(self.job_dir / "checkpoints")
        self.prior = CostLedger()  #: costs of earlier attempts, up to the checkpoint resumed from
        self.backend: CrypTenBackend | None = None
        #: optional DP of every revealed aggregate; its releases are saved with each checkpoint
        self.privacy = PrivateAggregator(DPSettings(**spec.dp)) if spec.dp else None

    def run(self) -> int:
        """Steps 1–4; the session is closed in every case (forcibly after a failure)."""
        spec = self.spec
        session = open_session(spec, self.link)
        try:
            self.backend = CrypTenBackend(precision_bits=spec.precision_bits, step_check=spec.step_check)
            result = self.strategy().run(self._context(self._resume(self.backend)))
            self._write_result(self.backend, result)
        except BaseException:
            session.close(force=True)
            raise
        session.close()
        self.store.close()
        log.info("job %s: session closed", spec.job_id)
        return 0

    def _resume(self, backend: CrypTenBackend) -> ResumableState | None:
        """Step 2: the state after the newest checkpoint both parties hold (None: start afresh)."""
        resume = agree.minimum(backend, self.checkpoints.latest())
        if resume == 0:
            return None
        if resume not in self.checkpoints.rounds():
            raise CheckpointError(f"checkpoint {resume} is missing on party{self.spec.role}")
        agree.check_same(backend, self.checkpoints.digest(resume), f"checkpoints of round {resume}")
        state, saved_costs = self.checkpoints.load(resume, self.strategy, backend.load_shares)
        self.prior.merge(ledger_from_dict(saved_costs))
        if self.privacy is not None:
            self.privacy.restore(read_releases(self.job_dir / f"dp-releases-{resume}.json"))
        log.info("job %s: resuming after unlearning round %d", self.spec.job_id, resume)
        return state

    def _context(self, state: ResumableState | None) -> UnlearnContext:
        spec, backend = self.spec, self.backend
        assert backend is not None
        models = self.job_dir / "models"
        oracle = ServiceOracle(
            self.store, self.link, spec.job_id, spec.arch, models, spec.task_timeout_s, spec.task_poll_s
        )
        return UnlearnContext(
            backend=backend,
            history=StoreHistory(self.store, spec.base_round),
            oracle=oracle,
            targets=tuple(spec.targets),
            params=self.params,
            on_progress=self._on_progress,
            on_checkpoint=self._on_checkpoint,
            resume_from=state,
            privacy=self.privacy,
        )

    def _costs(self) -> dict[str, Any]:
        """Earlier attempts' costs plus this run's (the strategy's ledger while it runs)."""
        total = CostLedger()
        total.merge(self.prior)
        if self.backend is not None:
            total.merge(self.backend.ledger)
        return total.to_dict()

    def _on_progress(self, p: Progress) -> None:
        total_bytes = sum(c["online_bytes"] + c["offline_bytes"] for c in self._costs().values())
        self.link.send(
            {
                "kind": "progress",
                "step": p.step,
                "t": p.unlearning_round,
                "total": p.total_rounds,
                "detail": p.detail,
                "bytes": total_bytes,
            }
        )

    def _on_checkpoint(self, state: ResumableState) -> None:
        assert self.backend is not None
        digest = self.checkpoints.save(state, self._costs(), self.backend.export_shares)
        heap.release()  # the round's temporaries are freed: give their pages back
        if self.privacy is not None:
            write_releases(self.job_dir / f"dp-releases-{state.round}.json", self.privacy.releases)
        self.link.send({"kind": "checkpoint", "t": state.round, "digest": digest})

    def _write_result(self, backend: CrypTenBackend, result: UnlearnResult) -> None:
        """Step 4: both parties hold the same model; write it and the report, tell the party."""
        merged = ledger_from_dict(result.report.get("costs", {}))
        merged.merge(self.prior)
        result.report["costs"] = merged.to_dict()  # every attempt, each up to its last checkpoint
        if self.privacy is not None:
            result.report["dp"] = {"settings": asdict(self.privacy.settings), "releases": releases_json(self.privacy)}
        # this party's worker, over the whole attempt (Linux reports ru_maxrss in KiB)
        result.report["worker_peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        model = result.model.detach().to(torch.float32).numpy()
        digest = model_hash(self.spec.arch, model)
        agree.check_same(backend, digest, "unlearned model")
        tmp = self.job_dir / "result-model.tmp.npy"
        np.save(tmp, model, allow_pickle=False)
        tmp.replace(self.job_dir / "result-model.npy")
        report = json.dumps(result.report, indent=1, sort_keys=True, default=float)
        (self.job_dir / "worker-report.json").write_text(report)
        self.link.send({"kind": "result", "model_hash": digest})
        log.info("job %s: result written (model %s); leaving the session", self.spec.job_id, digest[:12])


def releases_json(privacy: PrivateAggregator) -> list[dict[str, Any]]:
    """The Stage II releases with their members (public: the participants of replayed rounds)."""
    return [{**r.as_dict(), "members": list(r.members)} for r in privacy.releases]


def write_releases(path: Path, releases: list[Release]) -> None:
    """The releases up to a checkpoint (temp file, then rename), read back on resume."""
    tmp = path.with_suffix(".tmp")
    entries = [{"label": r.label, "noise_multiplier": r.noise_multiplier, "members": list(r.members)} for r in releases]
    tmp.write_text(json.dumps(entries))
    tmp.replace(path)


def read_releases(path: Path) -> list[Release]:
    """Releases `write_releases` stored (none when the checkpoint predates DP)."""
    if not path.exists():
        return []
    return [
        Release(e["label"], float(e["noise_multiplier"]), tuple(e["members"])) for e in json.loads(path.read_text())
    ]


def run_session(spec_path: Path, link: ParentLink) -> int:
    """Run the session attempt `spec_path` describes; 0 on success (raises on failure)."""
    return JobAttempt(WorkerSpec.read(spec_path), link).run()
