"""A party's job worker: `python -m server.jobs.worker`.

One process per session attempt (CrypTen's communicator is process-global; a crash only
loses this attempt). It imports torch and CrypTen first, then waits for its first message
from the party, {"kind": "spec", "path": attempt-K.json}; so a party can keep one worker
started in advance (the import takes seconds) and hand it the next attempt. Steps:

1. open the party's store read-only and the CrypTen session (rank = role, dealer = rank 2)
   at the rendezvous party0 chose;
2. agree with the other worker on the newest checkpoint both hold (0 = start) and check
   both hold the same public state there; load this party's shares from it;
3. run the strategy on `CrypTenBackend` over `StoreHistory` (this party's stored shares,
   loaded with no communication) with `ServiceOracle` (tasks through the client SDK),
   checkpointing after every unlearning round;
4. check both parties hold the same unlearned model, write `result-model.npy` and
   `worker-report.json` into the job directory, report the model hash to the party.

Exit codes: 0 done, 1 failed (traceback in the job log), 3 the party process went away.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import queue
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

EXIT_FAILED = 1
EXIT_ORPHANED = 3
REQUEST_TIMEOUT_S = 60.0
log = logging.getLogger("server.jobs.worker")


class ParentLink:
    """JSON lines to the party process (the original stdout) and replies from it (stdin).

    The worker's own stdout is pointed at stderr so no library print can corrupt the
    protocol. When stdin closes (the party died), the worker exits at once.
    """

    def __init__(self) -> None:
        self._out = os.fdopen(os.dup(1), "w", buffering=1)
        os.dup2(2, 1)
        self._lock = threading.Lock()
        self._replies: queue.Queue[dict[str, Any]] = queue.Queue()
        self._next = 0
        threading.Thread(target=self._read, name="parent-link", daemon=True).start()

    def _read(self) -> None:
        for line in sys.stdin:
            try:
                msg = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(msg, dict):
                self._replies.put(msg)
        log.error("the party process closed the link; stopping")
        os._exit(EXIT_ORPHANED)

    def wait_spec(self) -> Path:
        """Block until the party hands over a session attempt; returns its spec file."""
        while True:
            msg = self._replies.get()
            if msg.get("kind") == "spec" and isinstance(msg.get("path"), str):
                return Path(msg["path"])

    def send(self, message: dict[str, Any]) -> None:
        with self._lock:
            self._out.write(json.dumps(message) + "\n")
            self._out.flush()

    def request(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send a request and wait for its reply; raises if the party refused it."""
        self._next += 1
        self.send({**message, "id": self._next})
        while True:
            reply = self._replies.get(timeout=REQUEST_TIMEOUT_S)
            if reply.get("id") == self._next:
                break
        if not reply.get("ok", False):
            raise RuntimeError(f"party refused {message.get('kind')}: {reply.get('error', '')}")
        return reply


def _ledger_from_dict(data: dict[str, Any]):
    from mpc.costs import CostLedger, StepCost

    return CostLedger(steps={name: StepCost(**cost) for name, cost in data.items()})


def run(spec_path: Path, link: ParentLink) -> int:
    import torch

    from client_sdk.wire import model_hash
    from mpc.costs import CostLedger
    from mpc.crypten_backend import CrypTenBackend
    from mpc.session import Session, SessionConfig
    from server.jobs import agree
    from server.jobs.checkpoints import CheckpointDir, CheckpointError
    from server.jobs.history import StoreHistory
    from server.jobs.oracle import ServiceOracle
    from server.jobs.process import WorkerSpec
    from server.store import Store
    from unlearning import registry
    from unlearning.strategy import UnlearnContext

    spec = WorkerSpec.read(spec_path)
    job_dir = Path(spec.job_dir)
    store = Store(Path(spec.data_dir), spec.role, readonly=True)
    if store.global_model_hash(spec.base_round) != spec.base_model_hash:
        raise RuntimeError(f"this party's M_{spec.base_round} is not the job's base model")
    session = Session(
        SessionConfig(
            rank=spec.role,
            port=spec.port,
            host=spec.host,
            precision_bits=spec.precision_bits,
            timeout_s=spec.session_timeout_s,
            allow_remote=spec.allow_remote,
        )
    )
    log.info("job %s attempt %d: joining the session at %s", spec.job_id, spec.attempt, session.config.rendezvous)
    session.open()
    try:
        prior = CostLedger()  # costs of earlier attempts, up to the checkpoint resumed from
        backend = CrypTenBackend(precision_bits=spec.precision_bits, step_check=spec.step_check)

        def costs() -> dict[str, Any]:
            total = CostLedger()
            total.merge(prior)
            total.merge(backend.ledger)  # the strategy's ledger of this run while it runs
            return total.to_dict()

        checkpoints = CheckpointDir(job_dir / "checkpoints")
        resume = agree.minimum(checkpoints.latest())
        state = None
        if resume > 0:
            if resume not in checkpoints.rounds():
                raise CheckpointError(f"checkpoint {resume} is missing on party{spec.role}")
            agree.check_same(checkpoints.digest(resume), f"checkpoints of round {resume}")
            state, saved_costs = checkpoints.load(resume, lambda a, bits: backend.load_shares(a, precision_bits=bits))
            prior.merge(_ledger_from_dict(saved_costs))
            log.info("job %s: resuming after unlearning round %d", spec.job_id, resume)

        def on_progress(p) -> None:
            total_bytes = sum(c["online_bytes"] + c["offline_bytes"] for c in costs().values())
            link.send(
                {
                    "kind": "progress",
                    "step": p.step,
                    "t": p.unlearning_round,
                    "total": p.total_rounds,
                    "detail": p.detail,
                    "bytes": total_bytes,
                }
            )

        def on_checkpoint(st) -> None:
            digest = checkpoints.save(st, costs())
            link.send({"kind": "checkpoint", "t": st.round, "digest": digest})

        oracle = ServiceOracle(
            store, link, spec.job_id, spec.arch, job_dir / "models", spec.task_timeout_s, spec.task_poll_s
        )
        ctx = UnlearnContext(
            backend=backend,
            history=StoreHistory(store, spec.base_round),
            oracle=oracle,
            targets=tuple(spec.targets),
            params=spec.parameters,
            on_progress=on_progress,
            on_checkpoint=on_checkpoint,
            resume_from=state,
        )
        result = registry.create(spec.strategy).run(ctx)
        merged = _ledger_from_dict(result.report.get("costs", {}))
        merged.merge(prior)
        result.report["costs"] = merged.to_dict()  # every attempt, each up to its last checkpoint
        model = result.model.detach().to(torch.float32).numpy()
        digest = model_hash(spec.arch, model)
        agree.check_same(digest, "unlearned model")
        import numpy as np

        tmp = job_dir / "result-model.tmp.npy"
        np.save(tmp, model, allow_pickle=False)
        tmp.replace(job_dir / "result-model.npy")
        (job_dir / "worker-report.json").write_text(json.dumps(result.report, indent=1, sort_keys=True, default=float))
        link.send({"kind": "result", "model_hash": digest})
        log.info("job %s: result written (model %s); leaving the session", spec.job_id, digest[:12])
    except BaseException:
        session.close(force=True)
        raise
    session.close()
    store.close()
    log.info("job %s: session closed", spec.job_id)
    return 0


def _preload() -> None:
    """Import the heavy modules before the party hands over a session."""
    import mpc.crypten_backend  # noqa: F401  (torch, CrypTen)
    import unlearning.starfish.strategy  # noqa: F401


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="server.jobs.worker", description="Starfish job worker (one session attempt; spec read from stdin)"
    )
    parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s worker %(levelname)s %(message)s")
    link = ParentLink()
    _preload()
    spec = link.wait_spec()
    try:
        return run(spec, link)
    except Exception:
        log.error("job attempt failed:\n%s", traceback.format_exc())
        return EXIT_FAILED


if __name__ == "__main__":
    code = main()
    logging.shutdown()
    sys.stderr.flush()
    os._exit(code)  # the session is closed; skip the slow interpreter teardown of torch/gloo
