"""Flower's Simulation Engine (Ray) at scale, with and without Starfish.

The Flower MNIST example (`examples/flower/mnist_app.py`: `mnist_mlp`, 50,890 parameters,
one local epoch of SGD on an IID shard of MNIST's 60,000 images) with N virtual clients
and a fraction sampled per round, each run in a fresh process:

* plain — Flower's FedAvg: fitted models travel to the server in the clear;
* starfish — `StarfishMod` + `StarfishFedAvg` against party0 and party1 as real processes
  (TLS, durable stores, rounds opened on request): updates travel as secret shares.

The two modes run as interleaved A/B pairs in one benchmark run (`REPEATS` pairs at
N = 1,000, the order alternating: plain first, then Starfish first, ...), so the ratio
Starfish ÷ plain is taken between runs adjacent in time: per pair, and its min / median /
max over the pairs (`ratio_round_s_<N>`).

Per round (rounds after the first; the first also starts Ray's actors and loads MNIST in
each): wall time from `configure_train` to the end of `aggregate_train` (median, p95),
bytes (Starfish: client uploads from the receipts, party↔party exchange, the model Flower
sends each sampled client; plain: model down and up), each party's CPU seconds and
resident memory at the commit (`party_rounds`; `PartyProbe`), and for the whole run the CPU
seconds of each process group (parties, Ray = actors running the ClientApps + Ray's own
services, the driver = ServerApp + Flower's engine; whole run and per round from round 2
on — the per-round figure of "ray" includes its shutdown), the parties' peak memory, the
load average, and the clients' wall time inside the Starfish SDK (from their receipts).
`bench.flower_mod_profile` (`mod_profile`) says where a client's time goes in the mod.

Each run happens in a network namespace with loopback only (`starfish_flower.sandbox`).
`python -m bench flower_scale` (N = 100: one pair, N = 1,000: `REPEATS` pairs, 10 % per
round); `--quick`: N = 30 (3 per round: the parties' minimum cohort), one pair.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench import flower_mod_profile
from bench.env import load_average, peak_rss_bytes, stamp, write_result
from starfish_flower import offline, sandbox

NAME = "flower_scale"
REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "flower"
ROUNDS = 6
REPEATS = 3  #: interleaved A/B pairs (plain, Starfish) at N = 1,000
MODES = ("plain", "starfish")
RUN_TIMEOUT_S = 1200.0  #: one simulation, start to end
RAY_START_FAILED = "The current node timed out during startup"  #: Ray's message when its raylet did not start
FRACTION = 0.1
MODEL_PARAMS = 50_890  #: mnist_mlp


def _proc_cpu(pid: int) -> float | None:
    """utime + stime (+ reaped children) of a process, in seconds; None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def _children() -> dict[int, int]:
    """pid → parent pid of every process."""
    out = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                out[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    return out


class CpuSampler:
    """Samples the CPU seconds of this process's descendants every second (processes that
    end keep their last sample), split into the given named pid groups and the rest."""

    def __init__(self, groups: dict[str, list[int]]):
        self.groups = groups
        self.last: dict[int, float] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self.stop.wait(1.0):
            self.sample()

    def sample(self) -> None:
        parents, me = _children(), os.getpid()
        for pid in parents:
            p, hops = pid, 0
            while p not in (me, 0, 1) and hops < 32:
                p, hops = parents.get(p, 0), hops + 1
            if p == me and pid != me and (cpu := _proc_cpu(pid)) is not None:
                self.last[pid] = cpu

    def totals(self) -> dict[str, float]:
        self.sample()
        grouped = {pid for pids in self.groups.values() for pid in pids}
        out = {name: sum(self.last.get(p, 0.0) for p in pids) for name, pids in self.groups.items()}
        out["ray"] = sum(v for p, v in self.last.items() if p not in grouped)
        out["driver"] = sum(os.times()[:2])
        return {k: round(v, 2) for k, v in out.items()}


def _rss_bytes(pid: int) -> int:
    """The resident memory (VmRSS) of a running process, in bytes; 0 if not reported."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


class PartyProbe:
    """Each party's CPU seconds and resident memory, read when a round starts and when it
    commits: per round, the CPU the party spent and its RSS at the commit."""

    def __init__(self, pids: dict[str, int]):
        self.pids = pids
        self.started: dict[str, float] = {}
        self.rounds: list[dict[str, Any]] = []

    def round_started(self) -> None:
        self.started = {name: _proc_cpu(pid) or 0.0 for name, pid in self.pids.items()}

    def round_ended(self) -> None:
        cpu = {name: round((_proc_cpu(pid) or 0.0) - self.started.get(name, 0.0), 3) for name, pid in self.pids.items()}
        rss = {name: round(_rss_bytes(pid) / 2**20, 1) for name, pid in self.pids.items()}
        self.rounds.append({"cpu_s": cpu, "rss_mb": rss})


def _timed(base: type, sampler: CpuSampler, probe: PartyProbe) -> type:
    """A strategy class recording each round's wall time (configure_train → aggregate_train),
    the CPU seconds of each process group when round 2 starts, and the parties' CPU and RSS
    per round (`probe`)."""

    class Timed(base):
        def configure_train(self, server_round, arrays, config, grid):
            if server_round == 2:
                self.cpu_round2 = sampler.totals()
            probe.round_started()
            self.round_started = time.perf_counter()
            return super().configure_train(server_round, arrays, config, grid)

        def aggregate_train(self, server_round, replies):
            out = super().aggregate_train(server_round, replies)
            self.round_seconds = [*getattr(self, "round_seconds", []), time.perf_counter() - self.round_started]
            probe.round_ended()
            return out

    return Timed


def _deployment(clients: int):
    """party0 and party1 as real processes, rounds opened on request, N registered clients."""
    from harness.local import LocalDeployment

    dep = LocalDeployment(
        Path(tempfile.mkdtemp(prefix="flower-scale-")) / "dep",
        clients=[f"client{i}" for i in range(clients)],
        rounds={"opening": "on_request", "deadline_s": 900.0, "poll_s": 0.05},
        jobs={"standby": "off"},
    )
    os.environ["STARFISH_OUTBOX"] = str(dep.root / "outbox")  # the virtual clients' SDK outboxes (Ray inherits it)
    dep.start()
    return dep


def _server_app(clients: int, rounds: int, admin, sampler: CpuSampler, probe: PartyProbe, box: dict[str, Any]):
    """The example's ServerApp: FedAvg, or StarfishFedAvg when `admin` is given; the strategy
    (timed) lands in `box["s"]`."""
    import mnist_app
    from flwr.app import ArrayRecord, ConfigRecord
    from flwr.serverapp import ServerApp
    from flwr.serverapp.strategy import FedAvg

    from starfish_flower import StarfishFedAvg

    plan = mnist_app.Plan(rounds=rounds, fraction_train=FRACTION, forget=None)
    app = ServerApp()

    @app.main()
    def main(grid, context) -> None:
        k = round(clients * FRACTION)  # FedAvg sizes the sample before it waits for every node: pin it
        sampling = {"fraction_train": FRACTION, "fraction_evaluate": 0.0, "min_available_nodes": clients}
        sampling["min_train_nodes"] = k
        cls = _timed(StarfishFedAvg if admin else FedAvg, sampler, probe)
        box["s"] = strategy = cls(admin, mnist_app.ARCH, 1.0, **sampling) if admin else cls(**sampling)
        config = ConfigRecord({"client-lr": plan.client_lr, "local-epochs": plan.local_epochs})
        strategy.start(grid, ArrayRecord(mnist_app.new_model().state_dict()), rounds, train_config=config)

    return app


def child(mode: str, clients: int, rounds: int, out: Path) -> None:
    """One simulation (run in a fresh process); writes its figures to `out`."""
    import starfish_flower  # noqa: F401  (before flwr: no telemetry)

    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(EXAMPLE), os.environ.get("PYTHONPATH")) if p)
    sys.path.insert(0, str(EXAMPLE))
    import mnist_app
    from flwr.simulation import run_simulation

    from starfish_flower import Parties

    figures: dict[str, Any] = {"mode": mode, "clients": clients, "clients_per_round": round(clients * FRACTION)}
    box: dict[str, Any] = {}
    dep = _deployment(clients) if mode == "starfish" else None
    admin = dep.admin() if dep else None
    sampler = CpuSampler({"parties": [dep.procs[0].pid, dep.procs[1].pid]} if dep else {})
    probe = PartyProbe({f"party{r}": dep.procs[r].pid for r in (0, 1)} if dep else {})
    sampler.thread.start()
    parties = Parties(dep.address(0), dep.address(1), dep.ca_cert) if dep else None
    started = time.perf_counter()
    try:
        run_simulation(
            _server_app(clients, rounds, admin, sampler, probe, box),
            mnist_app.make_client_app(parties, dep.cred_path if dep else None),
            num_supernodes=clients,
            backend_config={"client_resources": {"num_cpus": 1}, "init_args": {"include_dashboard": False}},
        )
        figures["wall_s"] = round(time.perf_counter() - started, 1)
        figures["cpu_s"] = sampler.totals()
        strategy, steady = box["s"], max(1, rounds - 1)
        figures["cpu_s_per_round"] = {
            k: round((v - strategy.cpu_round2.get(k, 0.0)) / steady, 3) for k, v in figures["cpu_s"].items()
        }
        figures.update(_round_figures(strategy, admin, clients))
        if dep is not None:
            figures.update(_party_figures(dep, probe))
    finally:
        sampler.stop.set()
        if admin is not None:
            admin.close()
        if dep is not None:
            dep.stop()
    out.write_text(json.dumps(figures))


def _party_figures(dep, probe: PartyProbe) -> dict[str, Any]:
    """Per party: CPU seconds and RSS of every round (`party_rounds`), the median CPU per
    round over rounds ≥ 2, the largest RSS at a commit and the peak RSS (VmHWM)."""
    steady = probe.rounds[1:] or probe.rounds
    names = [f"party{r}" for r in (0, 1)]
    return {
        "party_rounds": probe.rounds,
        "party_cpu_s_per_round": {n: round(statistics.median(r["cpu_s"][n] for r in steady), 3) for n in names},
        "party_rss_mb_at_commit": {n: max(r["rss_mb"][n] for r in probe.rounds) for n in names},
        "party_peak_rss_mb": {n: round(peak_rss_bytes(dep.procs[int(n[-1])].pid) / 2**20, 1) for n in names},
    }


def _round_figures(strategy, admin, clients: int) -> dict[str, Any]:
    """round_s (median, p95 of rounds ≥ 2), bytes per round, SDK time, from the strategy."""
    seconds = strategy.round_seconds
    steady = sorted(seconds[1:]) or sorted(seconds)
    k = round(clients * FRACTION)
    model_bytes = 4 * MODEL_PARAMS
    out: dict[str, Any] = {
        "round_s_all": [round(s, 2) for s in seconds],
        "round_s": {
            "median": round(statistics.median(steady), 2),
            "p95": round(steady[min(len(steady) - 1, int(0.95 * len(steady)))], 2),
        },
    }
    if admin is None:
        out["bytes_per_round"] = {"model_down": k * model_bytes, "model_up": k * model_bytes}
        return out
    status = {r.round: r for r in admin.status().rounds}
    steady_rounds = strategy.rounds[1:] or strategy.rounds
    out["bytes_per_round"] = {
        "model_down": k * model_bytes,
        "client_upload": round(statistics.mean(r.upload_bytes for r in steady_rounds)),
        "party_exchange": round(statistics.mean(status[r.round].peer_bytes for r in steady_rounds)),
    }
    out["client_sdk_s_per_round"] = round(statistics.mean(r.client_sdk_s for r in steady_rounds), 2)
    out["members_per_round"] = [len(r.members) for r in strategy.rounds]
    return out


class RayDidNotStart(RuntimeError):
    """Ray's node timed out during startup: the run measured nothing (and would hang)."""


def _run_child(cmd: list[str], log: Path) -> int:
    """Run one simulation, output to `log`; its exit code. Killed after RUN_TIMEOUT_S, or at
    once when Ray's node did not start (RayDidNotStart: Flower's engine then waits forever)."""
    env = {**os.environ, **offline.SWITCHES}
    with log.open("wb") as fh:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=fh, stderr=subprocess.STDOUT)
    end = time.monotonic() + RUN_TIMEOUT_S
    while proc.poll() is None:
        ray_failed = RAY_START_FAILED in log.read_text(errors="replace")
        if ray_failed or time.monotonic() > end:
            proc.kill()  # the namespace's processes die with it (sandbox.loopback_only)
            proc.wait()
            if ray_failed:
                raise RayDidNotStart(RAY_START_FAILED)
            raise RuntimeError(f"the run did not end within {RUN_TIMEOUT_S} s")
        time.sleep(2.0)
    return proc.returncode


def _measure(mode: str, clients: int, rounds: int) -> dict[str, Any]:
    """One run in a fresh process: its figures and the load average before and after."""
    with tempfile.TemporaryDirectory() as tmp:
        out, log = Path(tmp) / "figures.json", Path(tmp) / "run.log"
        load_before = load_average()
        argv = [sys.executable, "-m", "bench.flower_scale", mode, str(clients), str(rounds), str(out)]
        code = _run_child(sandbox.loopback_only(argv), log)
        if code != 0:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
            raise RuntimeError(f"{mode} run with {clients} clients failed ({code}):\n{tail}")
        figures = json.loads(out.read_text())
    figures["load_average"] = {"start": load_before, "end": load_average()}
    return figures


def _one(mode: str, clients: int, rounds: int, again: bool = True) -> dict[str, Any]:
    """`_measure`; a run whose Ray node did not start is made again, once."""
    print(f"   {mode}: {clients} clients, {round(clients * FRACTION)} per round", flush=True)
    try:
        return _measure(mode, clients, rounds)
    except RayDidNotStart:
        if not again:
            raise
        print("   Ray's node did not start; running it again", flush=True)
        return _one(mode, clients, rounds, again=False)


def _pairs(size: int, repeats: int, rounds: int) -> list[dict[str, Any]]:
    """`repeats` A/B pairs at one size, interleaved and counterbalanced (plain first, then
    Starfish first, ...); each run tagged with its pair."""
    runs = []
    for pair in range(repeats):
        order = ("plain", "starfish") if pair % 2 == 0 else ("starfish", "plain")
        runs += [{**_one(mode, size, rounds), "pair": pair} for mode in order]
    return runs


def ratios(runs: list[dict[str, Any]], size: int) -> dict[str, Any]:
    """Starfish ÷ plain median round at one size: per A/B pair (same pair, adjacent in time),
    their min / median / max, and the ratio of the medians over all steady rounds pooled."""
    at = [r for r in runs if r["clients"] == size]
    by_pair: dict[int, dict[str, dict[str, Any]]] = {}
    for r in at:
        by_pair.setdefault(r["pair"], {})[r["mode"]] = r
    pairs = [round(p["starfish"]["round_s"]["median"] / p["plain"]["round_s"]["median"], 2) for p in by_pair.values()]
    pooled = {m: statistics.median(s for r in at if r["mode"] == m for s in r["round_s_all"][1:]) for m in MODES}
    return {
        "pairs": pairs,
        "min": min(pairs),
        "median": round(statistics.median(pairs), 2),
        "max": max(pairs),
        "pooled": round(pooled["starfish"] / pooled["plain"], 2),
    }


def run(quick: bool = False) -> dict[str, Any]:
    """N = 100 (one A/B pair) and N = 1,000 (`REPEATS` interleaved pairs); `quick`: N = 30, one pair."""
    if not sandbox.available():
        raise RuntimeError("cannot create a loopback-only network namespace (unshare --net) for the simulation")
    repeats = {30: 1} if quick else {100: 1, 1000: REPEATS}
    rounds = 3 if quick else ROUNDS
    params = {"sizes": list(repeats), "pairs": repeats, "fraction": FRACTION, "rounds": rounds}
    meta = stamp({**params, "model": "mnist_mlp", "params": MODEL_PARAMS})
    runs = [r for n, k in repeats.items() for r in _pairs(n, k, rounds)]
    figures: dict[str, Any] = {"runs": runs, "mod_profile": flower_mod_profile.profile(100 if not quick else 20)}
    for n in repeats:
        figures[f"ratio_round_s_{n}"] = ratios(runs, n)
    return write_result(NAME + ("_quick" if quick else ""), meta, figures)


if __name__ == "__main__":
    child(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]))
