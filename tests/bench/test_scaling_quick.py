"""The scaling benchmark: its quick grid on real dealer and party processes, the fitted cost model,
the default schedule it composes a job from, and its RESULTS.md section."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from bench import env, report_format, scaling
from bench.report_scaling import section_scaling
from bench.scaling_model import linear_fit, schedule, total_bytes


def _point(result: dict[str, Any], m: int, n: int, t: int) -> dict[str, Any]:
    return next(p for p in result["figures"]["points"] if (p["m"], p["n"], p["T"]) == (m, n, t))


@pytest.mark.timeout(300)
def test_quick_grid_measures_every_point_and_costs_grow_with_m_and_n(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(env, "RESULTS_DIR", tmp_path)
    monkeypatch.setenv(env.FORCE_ENV, "1")  # a smoke run: recorded as loaded when the machine is busy
    scaling.run(quick=True)
    result = env.read_result("scaling_quick")
    assert result is not None and result["meta"]["params"]["quick"] is True
    grid = {(p["m"], p["n"], p["T"]) for p in result["figures"]["points"]}
    expected = {(p["m"], p["n"], p["T"]) for p in scaling.points(scaling.QUICK_GRID)}
    assert grid == expected == {(2_000, 4, 6), (8_000, 4, 6), (2_000, 8, 6), (2_000, 4, 12)}
    assert result["figures"]["skipped"] == [] and len(result["figures"]["composite"]) == 4
    assert result["figures"]["rss_fit"]["points"] == 3
    base, big_m, big_n, long_t = (
        _point(result, *k) for k in ((2_000, 4, 6), (8_000, 4, 6), (2_000, 8, 6), (2_000, 4, 12))
    )
    for step in ("UE-first", "UE", "TC"):
        assert total_bytes(big_m["steps"][step]) > 3 * total_bytes(base["steps"][step])
        assert total_bytes(big_n["steps"][step]) > 1.5 * total_bytes(base["steps"][step])  # n − 1: 3 → 7
    assert total_bytes(big_n["steps"]["TD"]) > total_bytes(base["steps"]["TD"])
    assert total_bytes(long_t["steps"]["RS"]) > total_bytes(base["steps"]["RS"])
    assert set(long_t["steps"]) == {"setup", "TD", "RS"}  # the T axis runs only what depends on T
    for p in result["figures"]["points"]:
        assert p["peak_rss_bytes"]["party0"] > 50e6 and p["peak_rss_bytes"]["party1"] > 50e6
        assert set(p["plain_wall_s"]) == set(p["steps"]) and all(s > 0 for s in p["plain_wall_s"].values())
    for step, fit in result["figures"]["fits"].items():
        assert fit["bytes"]["slope"] > 0 and fit["bytes"]["r2"] > 0.9, step
    long_job = next(c for c in result["figures"]["composite"] if c["T"] == 12)
    assert long_job["counts"] == {"TD": 1, "RS": 1, "UE-first": 1, "UE": 8, "TC": 3}
    ue, tc = base["steps"]["UE"], base["steps"]["TC"]
    assert long_job["bytes"] > 8 * total_bytes(ue) + 3 * total_bytes(tc)


def test_the_default_schedule_counts_the_rounds_the_driver_runs() -> None:
    at20 = schedule(20)
    # σ 1: 20 replayed rounds; round 1 degenerate, 2 warm-up, 17 SecUE; T_c = 6 checks t = 6, 12, 18
    assert (at20["replayed"], at20["warmup"], at20["estimated"], at20["check_interval"]) == (20, 2, 17, 6)
    assert at20["checks"] == 3 == 20 // 6
    assert at20["comparison"] == "method1" and schedule(100)["comparison"] == "method2"
    assert schedule(100)["checks"] == 3 and schedule(100)["estimated"] == 97  # T_c = 30: t = 30, 60, 90


def test_linear_fit_recovers_a_line_and_reports_its_r2() -> None:
    fit = linear_fit([1.0, 2.0, 4.0, 8.0], [5.0, 7.0, 11.0, 19.0])
    assert fit is not None
    assert math.isclose(fit["slope"], 2.0) and math.isclose(fit["intercept"], 3.0) and math.isclose(fit["r2"], 1.0)
    noisy = linear_fit([1.0, 2.0, 3.0, 4.0], [1.0, 3.0, 2.0, 4.0])
    assert noisy is not None and 0 < noisy["r2"] < 1
    assert linear_fit([3.0, 3.0], [1.0, 2.0]) is None


def test_the_section_renders_tables_fit_and_figure(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    point = {
        "m": 100, "n": 3, "T": 4, "ue": True, "axes": ["m", "n", "T"],
        "peak_rss_bytes": {"party0": 2e9, "party1": 1e9},
    }  # fmt: skip
    cost = {
        "wall_s": 1.0,
        "offline_s": 0.5,
        "online_s": 0.5,
        "offline_bytes": 1e6,
        "online_bytes": 2e6,
        "online_rounds": 3,
    }
    steps = dict.fromkeys(("TD", "RS", "UE-first", "UE", "TC", "TC-sample"), cost)
    points = [
        {**point, "steps": steps, "plain_wall_s": dict.fromkeys(steps, 0.01)},
        {**point, "m": 200, "axes": ["m"], "steps": steps, "plain_wall_s": dict.fromkeys(steps, 0.02)},
    ]
    from bench.scaling_model import composite, fits

    meta = {
        "date_utc": "2026-01-01 00:00:00", "machine": {"cpu": "cpu", "cores": 2, "torch": "t", "crypten": "c"},
        "load_average_start": [0.1] * 3, "load_average_end": [0.1] * 3, "commit": "0123456789ab",
        "params": {"grid": {"m": {"values": [100, 200], "fixed": {"n": 3, "T": 4}, "ue_tc": True}}},
    }  # fmt: skip
    res = {
        "benchmark": "scaling",
        "meta": meta,
        "figures": {"points": points, "fits": fits(points), "composite": composite(points)},
    }
    monkeypatch.setattr(report_format, "read_result", {"scaling": res}.get)
    monkeypatch.setattr(report_format, "FIGURES", tmp_path)
    lines: list[str] = []
    section_scaling(lines)
    text = "\n".join(lines)
    assert "m ∈ {100, 200} at n = 3, T = 4" in text
    assert "| 200 | 3 | 4 | 1 | 1 |" in text  # T = 4: one SecUE round (t = 4), a check there (T_c = 2)
    assert "![scaling](figures/scaling.png)" in text and (tmp_path / "scaling.png").stat().st_size > 0
    assert "| TC | (n−1)·m |" in text


def test_a_point_whose_parties_would_not_fit_in_memory_is_skipped() -> None:
    def measured(m: int, rss: float) -> dict[str, Any]:
        return {"m": m, "n": 11, "T": 20, "steps": {"UE": {}}, "peak_rss_bytes": {"party0": rss, "party1": rss / 2}}

    # peak RSS = 1 GB + 100 B per element of (n−1)·m: at n = 11, m = 10⁷ that is 11 GB per party
    seen = [measured(10**5, 1e9 + 1e8), measured(10**6, 1e9 + 1e9)]
    big = {"m": 10**7, "n": 11, "T": 20, "ue": True}
    assert "would need about 20.5 GiB" in scaling.memory_refusal(big, seen, 16 * 2**30)
    assert scaling.memory_refusal(big, seen, 64 * 2**30) == ""
    assert scaling.memory_refusal({**big, "ue": False}, seen, 16 * 2**30) == ""  # TD and RS only
    assert scaling.memory_refusal(big, seen[:1], 16 * 2**30) == ""  # one point: no fit yet
