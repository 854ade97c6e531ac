"""The whole unlearning job with the operators on separate (emulated) hosts.

The `deploy/` recipe runs on network namespaces (`harness.netlab`): the dealer service, party0,
party1 and the clients each on their own host, joined by a bridge. The same job — Stage I history trained once,
then "unlearn client-00 with Starfish" filed by the admin, the other clients answering
warm-up and correction tasks — runs three times from the same saved history:

* `loopback`: every operator on one host (all addresses on its loopback interface);
* `lan`: 1 Gbit/s links, 0.5 ms round trip between hosts;
* `wan`: 100 Mbit/s links, 40 ms round trip between hosts.

The clients' host stands for every client's own host: its one link carries as many links'
rate as there are clients (`Emulation(stands_for=…)`), each client's path to a party has the
profile's round trip, and a party's link is the profile's, so the clients' uploads and
downloads are limited by the parties' links as they would be with one link per client.

Each profile's links are measured (TCP RTT and throughput party0 → party1, once the previous
job's load has decayed) before the job runs, and the measurement is stored beside the job's
figures: admin-observed wall time, party 0's ledger (online bytes and rounds, offline bytes,
per step), CPU seconds of every process of the run, and the load average (each job is filed
once the one-minute load has decayed to 1 per core, `bench.env.wait_for_quiet`). A step is
latency-bound on a link when its online rounds × RTT is a large part of its wall time there.

`python -m bench multihost [--quick]`; quick: 8×8 digits, small MLP, 20 clients, 6
rounds (minutes). Needs root and iproute2 (network namespaces); refuses to run without them.
"""

from __future__ import annotations

import json
import resource
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.env import CACHE_DIR, load_average, stamp, wait_for_quiet, write_result
from bench.paper import WHOLE_JOB_LAN
from bench.whole_job_service import ROUND_DEADLINE_S, TASK_DEADLINE_S, demo_config

NAME = "multihost"
PROFILE_ORDER = ("loopback", "lan", "wan")
PROBE_BYTES = 50_000_000
SESSION_SLACK_S = 120.0
LATENCY_BOUND_SHARE = 0.5
"""A step is latency-bound when rounds × RTT is at least this share of its wall time."""


def _overrides(cfg: Any) -> dict[str, dict[str, Any]]:
    rounds = {"deadline_s": ROUND_DEADLINE_S, "min_clients": cfg.num_clients, "max_rounds": cfg.rounds, "poll_s": 0.05}
    jobs = {"task_timeout_s": TASK_DEADLINE_S, "session_timeout_s": TASK_DEADLINE_S + SESSION_SLACK_S}
    return {"rounds": rounds, "jobs": jobs}


def _cpu_children() -> float:
    """CPU seconds (user + sys) of every reaped descendant of this process so far."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


class Bench:
    """The rendered recipe, its saved Stage I history and the runs made from it."""

    def __init__(self, root: Path, cfg: Any) -> None:
        from evaluation.simulator import build_federation
        from harness.multihost.recipe import hosts, render

        self.root, self.cfg = root, cfg
        clients = [c.client_id for c in build_federation(cfg.simulation()).clients]
        self.n_clients = len(clients)
        self.recipe = render(root / "deployment", clients, _overrides(cfg))
        self.config_path = root / "demo.json"
        self.config_path.write_text(json.dumps(cfg.as_dict()))
        self.addresses = hosts()
        self.saved = root / "saved"

    def _fleet(self, lab: Any, mode: str, out: Path) -> None:
        from harness.multihost.clients_host import command

        with open(self.root / f"fleet-{out.name}.log", "ab") as log:
            proc = lab.popen(
                "clients", command(self.recipe, self.config_path, mode, out), stdout=log, stderr=subprocess.STDOUT
            )
            code = proc.wait()
        if code != 0 and mode == "train":
            raise RuntimeError(f"Stage I failed on the clients' host (exit {code})")

    def _services(self, lab: Any) -> Any:
        from harness.multihost.hosts import OperatorHosts

        ops = OperatorHosts(lab, self.recipe)
        ops.start()
        return ops

    def stage1(self) -> dict[str, Any]:
        """Train the history once, all operators on one host; save the parties' data."""
        from harness.netlab.lab import Lab

        with Lab(self.addresses, single_host=True) as lab:
            ops = self._services(lab)
            try:
                self._fleet(lab, "train", self.root / "stage1.json")
            finally:
                ops.stop()
            ops.save_data(self.saved)
        return json.loads((self.root / "stage1.json").read_text())

    def job(self, profile_name: str) -> dict[str, Any]:
        """Restore the history, put the profile on the links, measure them, run the job."""
        from harness.netlab.emulation import Emulation, link_problems
        from harness.netlab.lab import Lab
        from harness.netlab.shaping import PROFILES

        out = self.root / f"job-{profile_name}"
        record: dict[str, Any] = {"profile": profile_name}
        with Lab(self.addresses, single_host=profile_name == "loopback") as lab:
            emu = None
            if not lab.single_host:
                emu = Emulation(lab, self.root / f"links-{profile_name}", stands_for={"clients": self.n_clients})
                calm_s = wait_for_quiet()  # a delay line measured beside the previous job's load lags
                record["link"] = emu.calibrate(PROFILES[profile_name], "party0", "party1", nbytes=PROBE_BYTES)
                record["link"]["quiet_wait_s"] = calm_s
                record["link"]["problems"] = link_problems(record["link"])
                if record["link"]["problems"]:  # an emulation that is not the profile measures nothing
                    raise RuntimeError(f"the {profile_name} link is not as specified: {record['link']['problems']}")
            from harness.multihost.hosts import OperatorHosts

            OperatorHosts(lab, self.recipe).restore_data(self.saved)
            cpu_before = _cpu_children()
            ops = self._services(lab)
            record["quiet_wait_s"] = wait_for_quiet()  # the previous job's (or Stage I's) load decays first
            record["load_before"] = load_average()
            try:
                self._fleet(lab, "unlearn", out)
            finally:
                ops.stop()
                record["load_after"] = load_average()
                if emu is not None:
                    record["delay_lines"] = emu.close()
            record["cpu_s_all_processes"] = _cpu_children() - cpu_before
        return {**record, **_job_figures(out)}


def _job_figures(out: Path) -> dict[str, Any]:
    outcome = json.loads((out / "outcome.json").read_text())
    if not outcome.get("ok"):
        raise RuntimeError(f"the job failed: {outcome.get('error')} (log: {out.parent / f'fleet-{out.name}.log'})")
    report = json.loads((out / "report.json").read_text())
    costs = report["costs"]
    total = {k: sum(float(c[k]) for c in costs.values()) for k in ("online_bytes", "offline_bytes", "online_rounds")}
    return {
        "wall_s": outcome["seconds"],
        "job_seconds": report["job"].get("seconds"),
        "online_bytes": int(total["online_bytes"]),
        "offline_bytes": int(total["offline_bytes"]),
        "online_rounds": int(total["online_rounds"]),
        "session_attempts": report["job"].get("session_attempts"),
        "selected_rounds": report["selection"]["selected_rounds"],
        "model_hash": outcome["model_hash"],
        "steps": costs,
    }


def latency_analysis(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per step and linked profile: rounds × measured RTT against the step's wall time."""
    out: dict[str, Any] = {}
    for name in ("lan", "wan"):
        run = runs.get(name)
        if run is None:
            continue
        rtt_s = run["link"]["measured"]["rtt_ms_median"] / 1000
        steps = {}
        for step, c in run["steps"].items():
            floor = c["online_rounds"] * rtt_s
            base = runs["loopback"]["steps"].get(step, {}).get("seconds", 0.0)
            steps[step] = {
                "online_rounds": c["online_rounds"],
                "seconds": c["seconds"],
                "loopback_seconds": base,
                "rounds_x_rtt_s": floor,
                "latency_bound": c["seconds"] > 0 and floor >= LATENCY_BOUND_SHARE * c["seconds"],
            }
        out[name] = {"rtt_s": rtt_s, "steps": steps}
    return out


def run(quick: bool = False) -> dict[str, Any]:
    from harness.netlab.lab import unavailable

    reason = unavailable()
    if reason is not None:
        raise RuntimeError(f"the multi-host benchmark needs network namespaces: {reason}")
    cfg = demo_config(quick)
    cfg.validate()
    meta = stamp(
        {
            "demo_config": cfg.as_dict(),
            "quick": quick,
            "path": "deploy/ recipe on network namespaces (harness.netlab): dealer service, party0, party1 and the "
            "clients each on their own host; MPC plane TLS 1.3; admin RPC from the clients' host",
            "clients_link": "the clients' host has one profile link per client (rate × clients, the profile's delay)",
        }
    )
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    (CACHE_DIR / ".gitignore").write_text("*\n")
    root = Path(tempfile.mkdtemp(prefix="multihost-", dir=CACHE_DIR))
    try:
        bench = Bench(root, cfg)
        start = time.perf_counter()
        stage1 = bench.stage1()
        print(f"   Stage I (one host) {time.perf_counter() - start:.1f} s", flush=True)
        runs = {}
        for name in PROFILE_ORDER:
            runs[name] = bench.job(name)
            r = runs[name]
            link = r.get("link", {}).get("measured", {})
            print(
                f"   {name}: job {r['wall_s']:.1f} s, {r['online_bytes'] / 1e6:.1f} MB online, "
                f"{r['online_rounds']} rounds; link {link.get('rtt_ms_median', 0):.2f} ms, "
                f"{link.get('throughput_mbit', 0):.0f} Mbit/s",
                flush=True,
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    paper = dict(zip(("offline_s", "online_s", "offline_gb", "online_gb"), WHOLE_JOB_LAN["mnist"], strict=True))
    figures = {
        "stage1": stage1,
        "profiles": runs,
        "same_selection": len({json.dumps(r["selected_rounds"]) for r in runs.values()}) == 1,
        "latency": latency_analysis(runs),
        "paper_lan": paper,
    }
    write_result(NAME + ("_quick" if quick else ""), meta, figures)
    return figures
