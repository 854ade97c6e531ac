"""The soak's faults beyond process kills (`bench.soak`): storage faults on either party, and
unlearning jobs with a party restart during each.

* `StorageFaults.inject`: a full disk (a ballast file fills the party's tmpfs data dir) or a
  read-only store (a read-only bind mount over `shares/` or `models/`) on party0 or party1, at
  the upload (now, while a round is open) or at the commit (once the open round holds uploads
  of 90% of the active clients, so it closes while the fault lasts), held 2–6 s, then lifted.
  The parties' logs say how often the fault was met (`met`): the faulty party logs each call
  it answered "cannot write its store now", party0's coordinator each postponed round step.
* `Unlearner.run`: each leaver (a client that took part up to some round, then left) asks to be
  forgotten once its last round committed; the job runs while training goes on, party0 or
  party1 is SIGKILLed at a seeded offset into it and restarted 0.5–3 s later. `verify` reads
  both stores afterwards: the job succeeded, its model is the global model T+1 on both parties,
  the target holds no share on either and is a member of no later round.

A lock (`guard`) keeps party-level faults apart: the chaos thread takes it for a party restart
or a storage fault, a job for its whole run (its own restart included).
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from typing import Any

from bench.disk_faults import disk_full, read_only
from client_sdk import StarfishError
from harness.local import LocalDeployment
from proto.starfish.v1 import admin_pb2
from server.store import Store

COMMIT_SHARE = 0.9  #: a round holding this share of the active clients' uploads is about to close
MET = {"cannot write its store now": "answered_retry", "round step postponed": "round_step_postponed"}
JOB_TIMEOUT_S = 1800.0


class StorageFaults:
    """Seeded storage faults on one party at a time; what was injected, counted by label."""

    def __init__(self, dep: LocalDeployment, rng: random.Random, active_clients: int):
        self.dep, self.rng, self.active = dep, rng, active_clients
        self.injected: Counter[str] = Counter()

    def _fault(self, victim: int, kind: str, phase: str):
        data = self.dep.data_dir(victim)
        if kind == "full":
            return disk_full(data)
        return read_only(data / ("shares" if phase == "upload" else "models"))

    def _near_close(self, timeout_s: float = 40.0) -> bool:
        """Wait until the open round holds uploads of `COMMIT_SHARE` of the active clients."""
        end = time.time() + timeout_s
        while time.time() < end:
            store = Store(self.dep.data_dir(0), 0, readonly=True)
            try:
                rec = store.current_round()
                if (
                    rec is not None
                    and rec.state == "open"
                    and len(store.uploads(rec.round)) >= COMMIT_SHARE * self.active
                ):
                    return True
            finally:
                store.close()
            time.sleep(0.1)
        return False

    def inject(self) -> None:
        victim = self.rng.choice((0, 1))
        kind, phase = self.rng.choice(("full", "read-only")), self.rng.choice(("upload", "commit"))
        hold = self.rng.uniform(2.0, 6.0)
        if phase == "commit" and not self._near_close():
            return  # no round about to close (training ended, or a party is down): nothing injected
        with self._fault(victim, kind, phase):
            time.sleep(hold)
        self.injected[f"party{victim} {kind} at {phase}"] += 1

    def met(self) -> dict[str, dict[str, int]]:
        """Per party, how often its log says a storage fault was met (by kind of line)."""
        out = {}
        for role in (0, 1):
            text = (self.dep.root / "logs" / f"party{role}.log").read_text(errors="replace")
            out[f"party{role}"] = {name: text.count(line) for line, name in MET.items()}
        return out


class Unlearner:
    """One unlearning job per leaver, each with a party restart at a seeded offset."""

    def __init__(self, dep: LocalDeployment, leavers: dict[str, int], seed: int, guard: threading.Lock):
        self.dep, self.leavers, self.guard = dep, leavers, guard
        self.rng = random.Random(seed + 1)
        self.stop = threading.Event()
        self.jobs: list[dict[str, Any]] = []

    def _admin(self, call):
        """An admin call, retried while party0 restarts."""
        end = time.time() + 120
        while True:
            try:
                with self.dep.admin() as admin:
                    admin.timeout_s = 30.0
                    return call(admin)
            except StarfishError:
                if time.time() > end or self.stop.is_set():
                    raise
                time.sleep(0.5)

    def _await(self, predicate, timeout_s: float):
        end = time.time() + timeout_s
        while not self.stop.is_set() and time.time() < end:
            try:
                value = predicate()
            except StarfishError:
                value = None
            if value:
                return value
            time.sleep(0.5)
        return None

    def run(self) -> None:
        for k, (target, last_round) in enumerate(sorted(self.leavers.items(), key=lambda x: x[1])):
            if not self._await(lambda r=last_round: self._admin(lambda a: a.status()).latest_committed >= r, 3600):
                return
            with self.guard:
                try:
                    self.jobs.append(self._one_job(target, last_round, victim=k % 2))
                except StarfishError as exc:  # recorded as a job that did not succeed
                    self.jobs.append({"target": target, "left_after_round": last_round, "state": "ERROR"})
                    self.jobs[-1].update(error=str(exc), report_json="")

    def _one_job(self, target: str, last_round: int, victim: int) -> dict[str, Any]:
        start = time.perf_counter()
        job_id = self._admin(lambda a: a.unlearn([target]))
        offset, outage = self.rng.uniform(2.0, 20.0), self.rng.uniform(0.5, 3.0)
        ended = self._await(lambda: self._ended(job_id), offset)
        if ended is None:  # still running: restart a party during the job
            self.dep.kill(victim)
            time.sleep(outage)
            self.dep.start(victim)
        status = self._await(lambda: self._ended(job_id), JOB_TIMEOUT_S)
        report = (
            self._admin(lambda a: a.job_report(job_id))
            if status and status.state == admin_pb2.JOB_STATE_SUCCEEDED
            else None
        )
        record = {"job_id": job_id, "target": target, "left_after_round": last_round}
        record["restart"] = f"party{victim} at {offset:.1f} s, down {outage:.1f} s" if ended is None else "none"
        record["state"] = admin_pb2.JobState.Name(status.state) if status else "TIMEOUT"
        record["error"] = status.error if status else ""
        record["session_attempts"] = status.attempt if status else 0
        record["seconds"] = time.perf_counter() - start
        record["report_json"] = report.report_json if report is not None else ""
        return record

    def _ended(self, job_id: str):
        status = self._admin(lambda a: a.job_status(job_id))
        return status if status.state not in (admin_pb2.JOB_STATE_QUEUED, admin_pb2.JOB_STATE_RUNNING) else None

    def verify(self, stores: list[Store]) -> list[dict[str, Any]]:
        """Each job's figures: succeeded, its model M_{T+1} on both parties, target erased."""
        out = []
        for job in self.jobs:
            report = json.loads(job.pop("report_json") or "{}").get("job", {})
            base, model = report.get("base_round", -2), report.get("model_hash", "")
            later = [r for r in stores[0].committed_rounds() if r > base]
            record = {**job, "base_round": base, "rebased": report.get("rebased", 0)}
            record["succeeded"] = job["state"] == "JOB_STATE_SUCCEEDED"
            record["model_in_chain"] = bool(model) and all(s.global_model_hash(base + 1) == model for s in stores)
            record["erased"] = all(s.shares_held(job["target"]) == 0 and s.is_erased(job["target"]) for s in stores)
            record["erased"] &= not any(job["target"] in stores[0].round_members(r) for r in later)
            out.append(record)
        return out
