"""The benchmarks' own logic: benchmark sharing, synthetic uploads, cost models, report cells."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from bench import report_format
from bench.histories import SyntheticHistory, seeded_share
from bench.report_format import ratio, verdict
from bench.report_ue import target_line
from bench.sweeps import job_cost
from bench.switching import batched_model, comparator_stages, fit, paper_rule_threshold
from mpc.cluster import ClusterConfig, TwoPartyCluster
from mpc.plain_backend import PlainBackend
from mpc.protocols.secsrt import bitonic_stages

from helpers import bench_cases


@pytest.mark.timeout(180)
def test_seeded_shares_reconstruct_and_look_random() -> None:
    x = torch.linspace(-3.0, 3.0, 1001, dtype=torch.float64)
    with TwoPartyCluster(timeout=120, config=ClusterConfig(session_timeout_s=60)) as cluster:
        r0, r1 = cluster.run(bench_cases.seeded_share_case, x)
    assert torch.allclose(r0["revealed"], x, atol=2.0**-15)
    assert torch.equal(r0["revealed"], r1["revealed"])
    # neither share alone equals the encoding (the mask is a full-range random ring element)
    enc = torch.round(x * 2.0**16).to(torch.long)
    assert not torch.equal(r0["share"], enc) and not torch.equal(r1["share"], enc)
    assert (r1["share"].abs() > 2**40).float().mean() > 0.99


def test_plain_seeded_share_is_the_value() -> None:
    x = torch.randn(7, dtype=torch.float64)
    backend = PlainBackend()
    assert torch.equal(backend.reveal(seeded_share(backend, x, "k")), x)


def test_synthetic_thresholds_leave_fraction_alpha_above() -> None:
    hist = SyntheticHistory(m=200_000, num_clients=3, rounds=2, alpha=0.4, seed=3)
    for i in (1, 2):
        for j, c in enumerate(hist.ids):
            g = hist.plain_gradient(i, c)
            above = float((g.abs() > hist.deltas[i - 1, j]).double().mean())
            assert abs(above - 0.4) < 0.01
    # uploads are reproducible from the seed
    assert torch.equal(
        hist.plain_gradient(1, hist.ids[0]), SyntheticHistory(200_000, 3, 2, 0.4, seed=3).plain_gradient(1, hist.ids[0])
    )


@pytest.mark.parametrize("T", [2, 5, 8, 13, 40, 64])
def test_comparator_count_matches_the_sorting_network(T: int) -> None:
    widths = comparator_stages(T)
    n_pad = 1 << (T - 1).bit_length()
    assert len(widths) <= len(bitonic_stages(n_pad))
    if T == n_pad:  # no virtual rows: every comparator is real
        k = int(math.log2(T))
        assert list(widths) == [T // 2] * (k * (k + 1) // 2)
    assert sum(widths) >= T - 1  # a comparison sort needs at least T − 1 comparisons


def test_fit_recovers_latency_and_slope() -> None:
    points = [(n, 0.05 + 2e-6 * n) for n in (1, 10, 1000, 100_000)]
    f = fit(points)
    assert f["latency"] == pytest.approx(0.05, rel=1e-6)
    assert f["per_element"] == pytest.approx(2e-6, rel=1e-6)


def test_paper_rule_prefers_method1_while_division_is_expensive() -> None:
    cheap_div = {"mul": {"seconds": 1.0}, "div": {"seconds": 0.5}}
    costly_div = {"mul": {"seconds": 1.0}, "div": {"seconds": 1000.0}}
    assert paper_rule_threshold(cheap_div, "seconds") == 0
    assert paper_rule_threshold(costly_div, "seconds") > paper_rule_threshold(
        {"mul": {"seconds": 1.0}, "div": {"seconds": 50.0}}, "seconds"
    )


def test_batched_model_charges_division_once() -> None:
    zero = {"latency": 0.0, "per_element": 0.0}
    fits = {op: {"seconds": dict(zero)} for op in ("mul", "ge", "ge2", "div")}
    fits["div"]["seconds"] = {"latency": 3.0, "per_element": 0.0}
    fits["ge2"]["seconds"] = {"latency": 0.5, "per_element": 0.0}
    model = batched_model(fits, 16, "seconds")
    assert model["method2"] == pytest.approx(3.0)
    assert model["method1"] == pytest.approx(0.5 * len(comparator_stages(16)))


def test_job_cost_counts_estimated_and_checked_rounds() -> None:
    step = {"wall_s": 1.0, "offline_bytes": 10.0, "online_bytes": 100.0}
    steps = {"TD": step, "RS1": step, "TC": {k: 5 * v for k, v in step.items()}}
    ue = {"wall_s": 2.0, "offline_bytes": 20.0, "online_bytes": 200.0}
    cost = job_cost(steps, ue, {"warmup": 3, "estimate": 15, "check": 6, "skipped": 0}, "TC")
    assert cost["wall_s"] == pytest.approx(1 + 1 + 21 * 2 + 6 * 5)
    assert cost["online_bytes"] == pytest.approx(100 + 100 + 21 * 200 + 6 * 500)


def test_report_cells() -> None:
    assert ratio(1.0, 100.0) == "0.01×"
    assert ratio(1.0, 1000.0) == "1/1,000"
    assert ratio(5.0, 0.0) == "—"
    assert verdict(0.5) == "yes"
    assert verdict(1.5).startswith("no, 1.50×")
    assert np.isfinite(float(ratio(3.0, 2.0).rstrip("×")))


def _stage1_result(star_s: float, plain_s: float) -> dict:
    rounds = [{"cpu_s_clients": 1.0 + i, "cpu_s_parties": 0.5} for i in range(4)]
    figures = {
        "starfish_rounds": rounds,
        "plain_round_s": plain_s,
        "starfish_round_s": star_s,
        "time_overhead": star_s / plain_s,
        "plain_round_cpu_s": 1.0,
        "starfish_round_cpu_s": 2.0,
        "cpu_overhead": 2.0,
        "plain_round_bytes": 93.1e6,
        "starfish_round_bytes": 149.0e6,
        "bytes_overhead": 1.6,
        "target_time_overhead": 1.5,
        "meets_target": star_s / plain_s <= 1.5,
    }
    meta = {
        "date_utc": "2026-01-01 00:00:00",
        "machine": {"cpu": "cpu", "cores": 2},
        "load_average_start": [3.0, 2.0, 1.0],
        "load_average_end": [4.0, 2.0, 1.0],
        "params": {"params": 582026},
    }
    return {"benchmark": "stage1", "meta": meta, "figures": figures}


def test_stage1_section_shows_the_ratios_and_the_run_before(monkeypatch) -> None:
    import bench.report_stage1 as section

    results = {"stage1": _stage1_result(3.0, 1.0), "stage1_shake_baseline": _stage1_result(6.0, 1.0)}
    monkeypatch.setattr(report_format, "read_result", results.get)
    lines: list[str] = []
    section.section_stage1(lines)
    text = "\n".join(lines)
    assert "| wall time per round (s) | 1.00 | 3.00 | 3.00× | 6.00 | 6.00× |" in text
    assert "| payload bytes per round (MB) | 93.1 | 149.0 | 1.60× |" in text
    assert "clients 3.00, parties 0.50" in text  # median of rounds 2-4 (round 1 is a warm-up)
    assert "**not met**" in text
    del results["stage1_shake_baseline"]
    lines = []
    section.section_stage1(lines)
    assert "before" not in "\n".join(lines)


def test_ue_round_target_line() -> None:
    fast = {"wall_s": 0.5, "online_bytes": 30e6, "offline_bytes": 10e6}
    assert target_line(fast, {"party0": 2**30}).endswith("40.0 MB: met. Peak RSS: party0 1.00 GiB.")
    heavy = dict(fast, online_bytes=45e6)
    assert "55.0 MB: not met" in target_line(heavy, {})
    assert "not met" in target_line(dict(fast, wall_s=1.5), {})


def test_a_busy_machine_is_refused_unless_forced_and_then_marked_loaded(monkeypatch) -> None:
    import bench.env as env

    assert env.busy_reasons([0.5, 3.0, 9.0], 2, []) == []  # only the one-minute average counts
    assert "load average 2.5 on 2 cores" in env.busy_reasons([2.5, 1.0, 1.0], 2, [])[0]
    assert env.busy_reasons([0.1, 0, 0], 2, ["python -m pytest -q"]) == ["another run is alive: python -m pytest -q"]
    monkeypatch.setattr(env, "load_average", lambda: [7.0, 7.0, 7.0])
    monkeypatch.setattr(env, "other_runs", lambda: [])
    monkeypatch.delenv(env.FORCE_ENV, raising=False)
    with pytest.raises(env.MachineBusy, match="busy machine: one-minute load average 7"):
        env.stamp({})
    monkeypatch.setenv(env.FORCE_ENV, "1")
    meta = env.stamp({"x": 1})
    assert meta["loaded"] is True and meta["busy"] and meta["commit"]
    monkeypatch.setattr(env, "load_average", lambda: [0.2, 0.2, 0.2])
    assert env.stamp({})["loaded"] is False


def test_other_runs_finds_a_live_test_run() -> None:
    import subprocess
    import sys
    import time

    import bench.env as env

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "pytest-marker"])
    try:
        deadline = time.monotonic() + 10  # until the child has exec'd (its command line is then its own)
        while not any("pytest-marker" in cmd for cmd in env.other_runs()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert any("pytest-marker" in cmd for cmd in env.other_runs())
    finally:
        proc.kill()
        proc.wait()


def test_other_runs_ignores_a_test_run_waiting_for_the_shared_lock(tmp_path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    import bench.env as env

    lock = tmp_path / "cpu.lock"
    holder = subprocess.Popen(["flock", str(lock), "sleep", "30"])
    procs = [holder]
    try:
        deadline = time.monotonic() + 10
        while subprocess.run(["flock", "-n", str(lock), "true"]).returncode == 0 and time.monotonic() < deadline:
            time.sleep(0.05)  # until the holder has the lock
        waiters = [
            subprocess.Popen(
                [*wrapper, "flock", str(lock), sys.executable, "-c", "pass", "pytest-waiting"], start_new_session=True
            )
            for wrapper in ([], ["timeout", "60"])
        ]
        procs += waiters
        while any("pytest-waiting" not in _cmdline(w.pid) for w in waiters) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all("pytest-waiting" in _cmdline(w.pid) for w in waiters)  # they are there, blocked in flock
        assert not any("pytest-waiting" in cmd for cmd in env.other_runs())
    finally:
        for proc in procs:
            if proc is holder:
                proc.kill()
            else:  # the wrapper and what it started
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def test_stage1_section_shows_the_upload_check_against_the_same_deployment_without_it(monkeypatch) -> None:
    import bench.report_stage1 as section

    result = _stage1_result(3.0, 1.0)
    result["figures"].update(
        unvalidated_round_s=2.0,
        unvalidated_round_cpu_s=1.6,
        unvalidated_round_bytes=140.0e6,
        validation_overhead=1.5,
        validation_cpu_overhead=1.25,
        validation_bytes_overhead=149.0 / 140.0,
        target_validation_overhead=1.25,
        meets_validation_target=False,
    )
    monkeypatch.setattr(report_format, "read_result", {"stage1": result}.get)
    lines: list[str] = []
    section.section_stage1(lines)
    text = "\n".join(lines)
    assert "| wall time per round (s) | 2.00 | 3.00 | 1.50× |" in text
    assert "| payload bytes per round (MB) | 140.0 | 149.0 | 1.06× |" in text
    assert "checked round ≤ 1.25× an unchecked one (wall): **not met**" in text
    assert (
        "| the check's party-to-party traffic as its message sizes predict" in text
        and "d = 8,192) | 0 | 7.9 | — |" in text
    )  # 20·2·8·(3d + 11), the sketch of m = 582,026
