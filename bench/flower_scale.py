"""Flower's Simulation Engine (Ray) at scale, with and without Starfish.

The Flower MNIST example (`examples/flower/mnist_app.py`: `mnist_mlp`, 50,890 parameters,
one local epoch of SGD on an IID shard of MNIST's 60,000 images) with N virtual clients
and a fraction sampled per round, run twice per size, each in a fresh process:

* plain — Flower's FedAvg: fitted models travel to the server in the clear;
* starfish — `StarfishMod` + `StarfishFedAvg` against party0 and party1 as real processes
  (TLS, durable stores, rounds opened on request): updates travel as secret shares.

Per round (rounds after the first; the first also starts Ray's actors and loads MNIST in
each): wall time from `configure_train` to the end of `aggregate_train` (median, p95),
bytes (Starfish: client uploads from the receipts, party↔party exchange, the model Flower
sends each sampled client; plain: model down and up), and for the whole run the CPU seconds
of each process group (parties, Ray = actors running the ClientApps + Ray's own services,
the driver = ServerApp + Flower's engine; whole run and per round from round 2 on — the
per-round figure of "ray" includes its shutdown), the parties' peak memory, the load
average, and the clients' wall time inside the Starfish SDK (from their receipts). A cProfile
of the SDK steps one client takes per round (`sdk_profile`) says where that time goes.

Each run happens in a network namespace with loopback only (`starfish_flower.sandbox`).
`starfish bench --only flower_scale` (N = 100 and 1,000, 10 % per round); `--quick`: N = 20.
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

from bench.env import load_average, peak_rss_bytes, stamp, write_result
from starfish_flower import offline, sandbox

NAME = "flower_scale"
REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "flower"
ROUNDS = 6
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


def _timed(base: type, sampler: CpuSampler) -> type:
    """A strategy class recording each round's wall time (configure_train → aggregate_train)
    and the CPU seconds of each process group when round 2 starts."""

    class Timed(base):
        def configure_train(self, server_round, arrays, config, grid):
            if server_round == 2:
                self.cpu_round2 = sampler.totals()
            self.round_started = time.perf_counter()
            return super().configure_train(server_round, arrays, config, grid)

        def aggregate_train(self, server_round, replies):
            out = super().aggregate_train(server_round, replies)
            self.round_seconds = [*getattr(self, "round_seconds", []), time.perf_counter() - self.round_started]
            return out

    return Timed


def _deployment(clients: int):
    """party0 and party1 as real processes, rounds opened on request, N registered clients."""
    from starfish.local import LocalDeployment

    dep = LocalDeployment(
        Path(tempfile.mkdtemp(prefix="flower-scale-")) / "dep",
        clients=[f"client{i}" for i in range(clients)],
        rounds={"opening": "on_request", "deadline_s": 900.0, "poll_s": 0.05},
        jobs={"standby": "off"},
    )
    os.environ["STARFISH_OUTBOX"] = str(dep.root / "outbox")  # the virtual clients' SDK outboxes (Ray inherits it)
    dep.start()
    return dep


def _server_app(clients: int, rounds: int, admin, sampler: CpuSampler, box: dict[str, Any]):
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
        cls = _timed(StarfishFedAvg if admin else FedAvg, sampler)
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
    sampler.thread.start()
    parties = Parties(dep.address(0), dep.address(1), dep.ca_cert) if dep else None
    started = time.perf_counter()
    try:
        run_simulation(
            _server_app(clients, rounds, admin, sampler, box),
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
            peaks = {f"party{r}": peak_rss_bytes(dep.procs[r].pid) for r in (0, 1)}
            figures["party_peak_rss_mb"] = {name: round(b / 2**20, 1) for name, b in peaks.items()}
    finally:
        sampler.stop.set()
        if admin is not None:
            admin.close()
        if dep is not None:
            dep.stop()
    out.write_text(json.dumps(figures))


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


#: (file, function) of the steps a client takes per round: connect, register, round state,
#: make the sharing, store it in the outbox (fsync), send both halves, settle older entries
SDK_STEPS = (
    ("client.py", "__init__"),
    ("client.py", "register"),
    ("client.py", "round_state"),
    ("sharing.py", "make_sharing"),
    ("outbox.py", "save"),
    ("client.py", "_deliver"),
    ("client.py", "_settle"),
    ("client.py", "close"),
)


def sdk_profile(clients: int = 20) -> dict[str, Any]:
    """cProfile of what `StarfishMod` does with the SDK per client and round (new client,
    register, round state, share, upload to both parties) for `clients` uploads of a
    `mnist_mlp`-sized update against a local deployment; seconds per client by SDK step."""
    import cProfile
    import pstats

    import numpy as np

    from starfish.local import LocalDeployment

    ids = [f"client{i}" for i in range(clients)]
    with tempfile.TemporaryDirectory() as tmp:
        dep = LocalDeployment(Path(tmp) / "dep", clients=ids, rounds={"opening": "on_request", "deadline_s": 600.0})
        dep.start()
        try:
            with dep.admin() as admin:
                admin.start_training("mnist_mlp", np.zeros(MODEL_PARAMS, np.float32), 1.0)
                admin.open_round(1)
            g = np.random.default_rng(0).normal(0, 0.01, MODEL_PARAMS)  # benchmark data, not a secret
            profiler = cProfile.Profile()
            started = time.perf_counter()
            profiler.enable()
            for cid in ids:
                with dep.client(cid) as client:
                    client.register()
                    view = client.round_state()
                    client.submit(1, g, 60, model_hash=view.model_hash)
            profiler.disable()
            wall = time.perf_counter() - started
        finally:
            dep.stop()
    stats = pstats.Stats(profiler).stats  # (file, line, function) → (calls, ncalls, tottime, cumtime, callers)
    steps = {
        name: round(ct / clients, 4)
        for (file, _, name), (_, _, _, ct, _) in stats.items()
        if any(file.endswith(f"client_sdk/{f}") and name == n for f, n in SDK_STEPS)
    }
    return {"clients": clients, "seconds_per_client": round(wall / clients, 4), "by_step": steps}


def _one(mode: str, clients: int, rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "figures.json"
        load_before = load_average()
        cmd = sandbox.loopback_only(
            [sys.executable, "-m", "bench.flower_scale", mode, str(clients), str(rounds), str(out)]
        )
        print(f"   {mode}: {clients} clients, {round(clients * FRACTION)} per round", flush=True)
        log = Path(tmp) / "run.log"
        with log.open("wb") as fh:
            env = {**os.environ, **offline.SWITCHES}
            done = subprocess.run(cmd, cwd=REPO, env=env, stdout=fh, stderr=subprocess.STDOUT, check=False)
        if done.returncode != 0:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
            raise RuntimeError(f"{mode} run with {clients} clients failed ({done.returncode}):\n{tail}")
        figures = json.loads(out.read_text())
    figures["load_average"] = {"start": load_before, "end": load_average()}
    return figures


def run(quick: bool = False) -> dict[str, Any]:
    if not sandbox.available():
        raise RuntimeError("cannot create a loopback-only network namespace (unshare --net) for the simulation")
    sizes = [20] if quick else [100, 1000]
    rounds = 3 if quick else ROUNDS
    meta = stamp({"sizes": sizes, "fraction": FRACTION, "rounds": rounds, "model": "mnist_mlp", "params": MODEL_PARAMS})
    runs = [_one(mode, n, rounds) for n in sizes for mode in ("plain", "starfish")]
    figures = {"runs": runs, "sdk_profile": sdk_profile()}
    for n in sizes:
        plain, sf = (next(r for r in runs if r["clients"] == n and r["mode"] == m) for m in ("plain", "starfish"))
        figures[f"ratio_round_s_{n}"] = round(sf["round_s"]["median"] / plain["round_s"]["median"], 2)
    return write_result(NAME + ("_quick" if quick else ""), meta, figures)


if __name__ == "__main__":
    child(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]))
