"""Soak: Stage I with hundreds of clients while parties and client processes are killed.

`python -m bench soak` (`--quick`: 40 clients × 5 rounds). Setting: 200 SDK clients
hosted by 4 processes (`bench.soak_client`, 50 client threads each; the first 50 clients also
keep WatchTasks streams open on both parties), 20 rounds of FedAvg over a 2,000-parameter
model, both parties as real processes (TLS, durable stores) on loopback. A seeded chaos
thread acts every 2–6 s: it SIGKILLs party0 or party1 and restarts it after 0.5–8 s (35%), injects
a storage fault on one party (30%: disk full or read-only store, at the upload or at the commit,
held 2–6 s; each party's data dir is a tmpfs the soak mounts and removes, so it needs root), or
SIGKILLs one client process and restarts it after 0.5–3 s (its clients resume from their
outboxes). Unlearning jobs join the mix (`bench.soak_faults`): `jobs` clients leave after some
round and ask to be forgotten; each job runs while training goes on, and party0 or party1 is
SIGKILLed and restarted during it. An admin probe asks for the training status every second.

Afterwards, from the two stores and the client processes' acknowledgement logs:
`acked_uploads` (uploads both parties acknowledged), `acked_lost` (of those, not stored on
both parties with the acknowledged halves and binding, or not counted in their committed
round), `rounds_committed`, `corrupted_models` (committed rounds whose model differs from
plaintext FedAvg of the round's members beyond the fixed-point tolerance, or differs between
the parties), restarts, exclusions, round latency (open → commit) and admin latency
percentiles, CPU seconds of all processes and the load average; the storage faults injected
and how often the parties met them; for every job: succeeded, its model M_{T+1} on both
parties, its target erased (no share on either party, no later round). Acceptance:
`acked_lost == 0`, `corrupted_models == 0`, every job succeeded and erased its target. An
acknowledged upload of an erased target counts as kept when its round still lists it as a
member (its shares are gone by design).
"""

from __future__ import annotations

import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np

from bench.disk_faults import can_mount, tmpfs
from bench.env import load_average, stamp, write_result
from bench.soak_client import gradient
from bench.soak_faults import StorageFaults, Unlearner
from harness.local import REPO_ROOT, LocalDeployment
from server.store import Store

NAME = "soak"
FULL = {"clients": 200, "rounds": 20, "params": 2_000, "processes": 4, "watchers": 50, "jobs": 2, "seed": 0}
QUICK = {"clients": 40, "rounds": 6, "params": 500, "processes": 2, "watchers": 10, "jobs": 1, "seed": 0}
LR = 0.1
PRECISION_BITS = 16
DEADLINE_S = 30.0
TIMEOUT_S = 3600.0
TMPFS_MIB = 384  #: each party's data dir: 200 clients × 20 rounds of 2,000 parameters, and [limits] min_free_bytes
JOBS = {"task_timeout_s": 5.0, "pause_training_after_s": 20.0, "poll_s": 0.2}


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a live process (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    a = np.asarray(values)
    return {
        "n": len(values),
        "p50": float(np.percentile(a, 50)),
        "p90": float(np.percentile(a, 90)),
        "p99": float(np.percentile(a, 99)),
        "max": float(a.max()),
    }


class ClientProcesses:
    """The soak's client processes: started, killed (CPU time kept) and restarted by index."""

    def __init__(self, dep: LocalDeployment, groups: list[list[str]], params: int, rounds: int, watchers: int):
        self.dep, self.groups, self.params, self.rounds, self.watchers = dep, groups, params, rounds, watchers
        self.leavers: dict[str, int] = {}  #: client → the last round it takes part in
        self.procs: list[subprocess.Popen | None] = [None] * len(groups)
        self.lock = threading.Lock()

    def acklog(self, i: int) -> Path:
        return self.dep.root / f"acks-{i}.jsonl"

    def start(self, i: int) -> None:
        args = [str(self.dep.root), str(self.acklog(i)), str(self.params), str(self.rounds), str(self.watchers)]
        with open(self.dep.root / "logs" / f"clients-{i}.log", "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "bench.soak_client", *args, *self.groups[i]],
                cwd=REPO_ROOT,
                stdout=subprocess.DEVNULL,
                stderr=log,
                env={**os.environ, "SOAK_LEAVERS": json.dumps(self.leavers)},
            )
        with self.lock:
            self.procs[i] = proc

    def kill(self, i: int) -> bool:
        """SIGKILL process i if it still runs; returns whether it did."""
        with self.lock:
            proc = self.procs[i]
            if proc is None or proc.poll() is not None:
                return False
            proc.kill()
            proc.wait()
            return True

    def all_exited(self) -> bool:
        with self.lock:
            return all(p is not None and p.poll() is not None for p in self.procs)

    def finish(self) -> None:
        for i in range(len(self.procs)):
            self.kill(i)

    def records(self) -> list[dict]:
        out = []
        for i in range(len(self.groups)):
            path = self.acklog(i)
            if path.exists():
                out += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return out


class Chaos:
    """Seeded random faults until stopped: party restarts, storage faults, client process kills.
    Party-level faults take `guard` (an unlearning job holds it while it runs)."""

    def __init__(self, dep: LocalDeployment, clients: ClientProcesses, seed: int, storage: bool):
        self.dep, self.clients, self.rng = dep, clients, random.Random(seed)
        self.stop = threading.Event()
        self.guard = threading.Lock()
        self.restarts: Counter[str] = Counter()
        self.outages: list[float] = []
        self.party_cpu_s = 0.0
        self.errors: list[str] = []  #: faults that could not be injected (reported, never hidden)
        active = sum(len(g) for g in clients.groups) - len(clients.leavers)
        self.storage = StorageFaults(dep, self.rng, active) if storage else None

    def run(self) -> None:
        while not self.stop.wait(self.rng.uniform(2.0, 6.0)):
            roll = self.rng.random()
            try:
                if roll < 0.65 and self.guard.acquire(blocking=False):
                    try:
                        self._party_fault(roll)
                    finally:
                        self.guard.release()
                else:
                    self._client_kill()
            except Exception as exc:  # noqa: BLE001 - recorded in the result, the soak goes on
                self.errors.append(f"{type(exc).__name__}: {exc}")

    def _party_fault(self, roll: float) -> None:
        if roll >= 0.35 and self.storage is not None:
            self.storage.inject()
            return
        victim, outage = self.rng.choice((0, 1)), self.rng.uniform(0.5, 8.0)
        self.party_cpu_s += _cpu_s(self.dep.procs[victim].pid)
        self.dep.kill(victim)
        time.sleep(outage)
        self.dep.start(victim)
        self.restarts[f"party{victim}"] += 1
        self.outages.append(outage)

    def _client_kill(self) -> None:
        i = self.rng.randrange(len(self.clients.groups))
        if self.clients.kill(i):
            time.sleep(self.rng.uniform(0.5, 3.0))
            self.clients.start(i)
            self.restarts["client_processes"] += 1


class AdminProbe:
    """Asks party0 for the training status every second; latencies of the answers, refusals counted."""

    def __init__(self, dep: LocalDeployment):
        self.dep = dep
        self.latencies: list[float] = []
        self.unanswered = 0
        self.latest = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(1.0):
            try:
                with self.dep.admin() as admin:
                    admin.timeout_s = 10.0
                    start = time.perf_counter()
                    status = admin.status()
                    self.latencies.append(time.perf_counter() - start)
                    self.latest = status.latest_committed
            except Exception:  # noqa: BLE001 - party0 may be down on purpose
                self.unanswered += 1


def _tolerance(expected: np.ndarray) -> np.ndarray:
    """Fixed-point rounding (2^-f per coordinate, averaged) plus float32 rounding of the model."""
    return LR * 2.0**-PRECISION_BITS + 2 * np.finfo(np.float32).eps * np.maximum(1.0, np.abs(expected))


def _verify(dep: LocalDeployment, records: list[dict], params: int, unlearner: Unlearner) -> dict[str, Any]:
    acks = {(r["client"], r["round"]): r for r in records if "content_sha256" in r}
    stores = [Store(dep.data_dir(p), p, readonly=True) for p in (0, 1)]
    try:
        jobs = unlearner.verify(stores)
        lost = []
        for (client, r), rec in sorted(acks.items()):
            held = [s.upload(r, client) for s in stores]
            ok = all(
                h is not None
                and h.grad_sha256 == rec["content_sha256"][p]
                and h.binding_sha256 == rec["binding_sha256"]
                for p, h in enumerate(held)
            )
            if stores[0].is_erased(client):  # its shares are gone by design: the round still lists it
                ok = all(h is None for h in held)
            if not ok or client not in stores[0].round_members(r):
                lost.append(f"{client}/r{r}")
        corrupted, exclusions, latencies, members = [], Counter(), [], []
        committed = stores[0].commit_times()
        for rec in stores[0].all_round_records():
            if rec.state != "committed":
                continue
            r = rec.round
            group = stores[0].round_members(r)
            members.append(len(group))
            exclusions.update(reason for reason in stores[0].exclusions(r).values())
            latencies.append(committed[r] - rec.opened)
            previous, model = stores[0].global_model(r - 1).params, stores[0].global_model(r)
            ups = [(gradient(c, r, params), w) for c, w in stores[0].round_weights(r).items()]  # capped n_j
            total = sum(n for _, n in ups)
            expected = previous.astype(np.float64) - LR * sum(n * g for g, n in ups) / total
            same = stores[1].global_model_hash(r) == model.hash and group == stores[1].round_members(r)
            if not same or not np.all(np.abs(model.params - expected) <= _tolerance(expected)):
                corrupted.append(r)
        return {
            "acked_uploads": len(acks),
            "acked_lost": len(lost),
            "acked_lost_examples": lost[:10],
            "rounds_committed": len(members),
            "corrupted_models": len(corrupted),
            "corrupted_rounds": corrupted,
            "members_per_round": members,
            "uploads_counted": int(sum(members)),
            "exclusions": dict(exclusions),
            "round_latency_s": _percentiles(latencies),
            "jobs": jobs,
            "jobs_expected": len(unlearner.leavers),
            "jobs_succeeded": sum(j["succeeded"] for j in jobs),
            "jobs_erased": sum(j["erased"] and j["model_in_chain"] for j in jobs),
        }
    finally:
        for s in stores:
            s.close()


def _register(dep: LocalDeployment, ids: list[str]) -> None:
    def one(chunk: list[str]) -> None:
        for c in chunk:
            with dep.client(c) as sdk:
                sdk.register()

    threads = [threading.Thread(target=one, args=(ids[k::8],)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _leavers(ids: list[str], rounds: int, jobs: int) -> dict[str, int]:
    """The first `jobs` clients leave after rounds spread over the run (then ask to be forgotten)."""
    return {ids[k]: (k + 1) * rounds // (jobs + 1) for k in range(jobs)}


def _deployment(root: Path, ids: list[str], rounds: int) -> LocalDeployment:
    return LocalDeployment(
        root / "dep",
        clients=ids,
        rounds={"deadline_s": DEADLINE_S, "poll_s": 0.05, "peer_retry_s": 0.1, "max_rounds": rounds},
        precision_bits=PRECISION_BITS,
        jobs=dict(JOBS),
    )


def soak(
    root: Path, clients: int, rounds: int, params: int, processes: int, watchers: int, jobs: int, seed: int
) -> dict:
    cpu_children, cpu_self = _children_cpu_s(), sum(os.times()[:2])
    ids = [f"s{i:03d}" for i in range(clients)]
    dep = _deployment(root, ids, rounds)
    storage = can_mount()
    with ExitStack() as mounts:
        for role in (0, 1) if storage else ():
            mounts.enter_context(tmpfs(dep.data_dir(role), TMPFS_MIB))
        dep.start()
        groups = [ids[k::processes] for k in range(processes)]
        fleet = ClientProcesses(dep, groups, params, rounds, watchers // processes)  #: watchers: streams per party
        fleet.leavers = _leavers(ids, rounds, jobs)
        chaos, probe = Chaos(dep, fleet, seed, storage), AdminProbe(dep)
        unlearner = Unlearner(dep, fleet.leavers, seed, chaos.guard)
        try:
            wall, loads = _run(dep, ids, params, fleet, (chaos, probe, unlearner), rounds)
            party_cpu = chaos.party_cpu_s + sum(_cpu_s(p.pid) for p in dep.procs.values())
            records = fleet.records()
            figures = _verify(dep, records, params, unlearner)
            figures["storage_faults"] = _storage_figures(chaos.storage)
        finally:
            for x in (chaos, probe, unlearner):
                x.stop.set()
            fleet.finish()
            dep.stop()
    children = _children_cpu_s() - cpu_children  # parties and client processes, killed ones included
    cpu = {"parties": party_cpu, "client_processes": children - party_cpu, "harness": sum(os.times()[:2]) - cpu_self}
    setting = {"clients": clients, "rounds": rounds, "params": params, "client_processes": processes}
    setting["watch_streams_per_party"] = watchers
    return {**figures, **setting, **_run_figures(chaos, probe, records, loads), "wall_s": wall, "cpu_s": cpu}


def _storage_figures(storage: StorageFaults | None) -> dict[str, Any]:
    if storage is None:
        return {"injected": {}, "note": "not injected: mounting a tmpfs needs root"}
    return {"injected": dict(storage.injected), "met": storage.met()}


def _run(dep: LocalDeployment, ids: list[str], params: int, fleet: ClientProcesses, actors: tuple, rounds: int):
    """Train with every actor (chaos, probe, unlearner) running until the clients and jobs are
    done; returns the wall time and the 1-minute load averages seen."""
    probe, unlearner = actors[1], actors[2]
    with dep.admin() as admin:
        admin.start_training("soak-toy", np.zeros(params, dtype=np.float32), LR)
    _register(dep, ids)
    start = time.perf_counter()
    for i in range(len(fleet.groups)):
        fleet.start(i)
    threads = [threading.Thread(target=x.run, daemon=True) for x in actors]
    for t in threads:
        t.start()
    loads = []
    while not (fleet.all_exited() and probe.latest >= rounds and not threads[2].is_alive()):
        if time.perf_counter() - start > TIMEOUT_S:
            raise TimeoutError(
                f"soak did not finish {rounds} rounds and {len(unlearner.leavers)} jobs in {TIMEOUT_S} s"
            )
        loads.append(load_average()[0])
        time.sleep(1.0)
    wall = time.perf_counter() - start
    for x in actors:
        x.stop.set()
    for t in threads:
        t.join(60)
    return wall, loads


def _run_figures(chaos: Chaos, probe: AdminProbe, records: list[dict], loads: list[float]) -> dict[str, Any]:
    """What the faults were and how the clients and the admin fared."""
    return {
        "restarts": dict(chaos.restarts),
        "chaos_errors": chaos.errors,
        "party_outage_s": _percentiles(chaos.outages),
        "missed_rounds": sum(1 for r in records if "missed" in r),
        "sdk_errors": Counter(r["error"].split(":")[0] for r in records if "error" in r),
        "resumed_uploads": sum(1 for r in records if r.get("resumed")),
        "admin_latency_s": {**_percentiles(probe.latencies), "unanswered": probe.unanswered},
        "load_average_1min": _percentiles(loads),
    }


def run(quick: bool) -> dict:
    params = QUICK if quick else FULL
    meta = stamp(params)
    with tempfile.TemporaryDirectory(prefix="starfish-soak-") as tmp:
        figures = soak(Path(tmp), **params)
    out = write_result(NAME + ("_quick" if quick else ""), meta, figures)
    print(
        f"   acked {figures['acked_uploads']}, lost {figures['acked_lost']}, rounds {figures['rounds_committed']}, "
        f"corrupted {figures['corrupted_models']}, restarts {figures['restarts']}, "
        f"storage faults {figures['storage_faults']['injected']}, jobs {len(figures['jobs'])} "
        f"(succeeded {figures['jobs_succeeded']}, erased {figures['jobs_erased']})",
        flush=True,
    )
    return out


if __name__ == "__main__":
    run(quick="--quick" in sys.argv)
