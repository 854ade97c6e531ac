"""Parameter sweeps of Starfish (the analogue of the paper's Figures 4–6 and 8–12).

One parameter at a time moves away from the paper's setting (σ 0.6, α 0.4, β 0.1, B 2):

* quality, in plaintext, on one trained MNIST history (`bench.quality_compare`'s seed-0
  history: 20 clients, 40 rounds, MLP): TER and BA-ASR of the unlearned model, ARP, and the
  numbers of estimated, checked and warm-up rounds of each run. α is the clients'
  tolerance rate: their thresholds δ_i^j are recomputed from the stored gradients;
* 2PC cost, at the paper's MNIST CNN size (582,026 parameters, 19 remaining clients): the
  per-step costs of UE for each B and of TC (full and sample-first) are measured on a dealer
  and two parties (`bench.unlearning_cost.measure`); the cost of each swept job is then
  TD + RS + Σ rounds (UE) + checks × TC with the round counts of its plaintext run (the
  2PC run follows the same schedule: selection and flags agree, see `bench.whole_job`).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

import numpy as np

from bench.env import read_result, single_thread, stamp, write_result
from bench.histories import cached_simulation, seeded_history
from bench.quality_compare import history_config
from bench.unlearning_cost import measure, model_size
from mpc.cluster import TwoPartyError

NAME = "sweeps"
DEFAULTS = {"sigma": 0.6, "alpha": 0.4, "beta": 0.1, "buffer_size": 2, "recovery_rounds": 0}
GRID_FULL = {
    "sigma": (0.2, 0.4, 0.6, 0.8, 1.0),
    "alpha": (0.05, 0.1, 0.2, 0.4, 0.6, 0.8),
    "beta": (0.05, 0.1, 0.2, 0.3, 0.5),
    "buffer_size": (1, 2, 3, 4),
}
GRID_QUICK = {"sigma": (0.4, 0.8), "alpha": (0.1, 0.6), "beta": (0.05, 0.3), "buffer_size": (1, 3)}


def with_alpha(result: Any, alpha: float) -> np.ndarray:
    """δ_i^j recomputed by every client at tolerance rate α from its stored gradient."""
    from client_sdk.stats import tolerance_threshold

    T, N = result.norms.shape
    out = np.zeros((T, N))
    for i in range(T):
        for j in range(N):
            out[i, j] = tolerance_threshold(np.asarray(result.grads[i, j]), alpha)
    return out


def plaintext_run(result: Any, params: dict[str, Any], deltas: np.ndarray | None) -> dict[str, Any]:
    """Starfish on PlainBackend; metrics and the schedule of rounds."""
    import torch

    from bench.histories import SeededHistory, SeededOracle
    from evaluation.unlearning_metrics import Evaluator
    from mpc.plain_backend import PlainBackend
    from unlearning.starfish import StarfishStrategy
    from unlearning.strategy import UnlearnContext

    history = seeded_history(result)
    if deltas is not None:
        fed = result.federation
        history = SeededHistory(
            result.models, result.client_ids, fed.n_samples, result.config.lr, result.grads, result.norms, deltas
        )
    oracle = SeededOracle(result)
    ctx = UnlearnContext(backend=PlainBackend(), history=history, oracle=oracle, targets=result.targets, params=params)
    with single_thread():
        out = StarfishStrategy().run(ctx)
    kinds = [e.get("kind") for e in out.report["rounds"]]
    metrics = Evaluator(result).evaluate(out.model.to(torch.float32))
    fired = [f for e in out.report["flags"] for f in e["flags"].values()]
    return {
        "ter": 100.0 * metrics["ter"],
        "ba_asr": 100.0 * metrics["ba_asr"],
        "mia_asr": 100.0 * metrics["mia_asr"],
        "arp": out.report["arp_percent"],
        "rounds": {k: kinds.count(k) for k in ("warmup", "estimate", "check", "skipped")},
        "flag_rate": sum(fired) / len(fired) if fired else None,
    }


def job_cost(
    steps: dict[str, dict[str, float]], ue: dict[str, float], rounds: dict[str, int], tc_key: str
) -> dict[str, float]:
    """TD + RS1 + (estimated and checked rounds) × UE + checks × TC, for seconds and bytes.

    Warm-up rounds are left out: their 2PC work is one aggregate reveal and the curvature
    bits (the clients' exact gradients replace the estimate)."""
    n_ue = rounds["estimate"] + rounds["check"]
    out = {}
    for key in ("wall_s", "offline_bytes", "online_bytes"):
        out[key] = steps["TD"][key] + steps["RS1"][key] + n_ue * ue[key] + rounds["check"] * steps[tc_key][key]
    return out


def previous_quality(name: str, params: dict[str, Any]) -> dict[str, list[dict[str, Any]]] | None:
    """The quality part of an earlier result with the same grid, defaults and history, if any.

    The plaintext quality runs do not depend on the machine's load; only the 2PC costs are
    re-measured when the benchmark runs again."""
    old = read_result(name)
    if old is None:
        return None
    same = all(
        json.dumps(old["meta"]["params"].get(k), sort_keys=True) == json.dumps(params.get(k), sort_keys=True)
        for k in ("grid", "defaults", "simulation")
    )
    return old["figures"]["quality"] if same else None


def sweep_quality(result: Any, grid: dict[str, tuple]) -> dict[str, list[dict[str, Any]]]:
    """One plaintext Starfish run per grid point (one parameter away from the defaults)."""
    quality: dict[str, list[dict[str, Any]]] = {}
    runs: list[tuple[str, Any, dict[str, Any]]] = [("default", None, DEFAULTS)]
    for name, values in grid.items():
        for value in values:
            if value != DEFAULTS[name]:
                runs.append((name, value, {**DEFAULTS, name: value}))
    for name, value, params in runs:
        deltas = with_alpha(result, float(value)) if name == "alpha" else None
        row = {"value": value, **plaintext_run(result, params, deltas)}
        quality.setdefault(name, []).append(row)
        print(
            f"   {name}={value}: TER {row['ter']:.1f} BA-ASR {row['ba_asr']:.1f} ARP {row['arp']:.1f} "
            f"rounds {row['rounds']}",
            flush=True,
        )
    for name in grid:
        quality[name] = sorted(
            quality[name] + [{**quality["default"][0], "value": DEFAULTS[name]}], key=lambda r: r["value"]
        )
    del quality["default"]
    return quality


def run(quick: bool = False) -> dict[str, Any]:
    grid = GRID_QUICK if quick else GRID_FULL
    config = history_config(quick, 0)
    m = model_size("mnist_cnn") // (10 if quick else 1)
    meta = stamp(
        {"grid": grid, "defaults": DEFAULTS, "simulation": asdict(config), "cost_model_size": m, "quick": quick}
    )
    quality = previous_quality(NAME + ("_quick" if quick else ""), meta["params"])
    if quality is None:
        quality = sweep_quality(cached_simulation(config), grid)
        write_result(
            NAME + ("_quick" if quick else ""), meta, {"quality": quality, "partial": True}
        )  # survives an interruption
    else:
        print("   quality: reusing the plaintext runs of the previous result (same grid and history)", flush=True)
    # 2PC per-step costs at the CNN size (those of bench.unlearning_cost when it measured this size)
    steps_result = read_result("unlearning_cost" + ("_quick" if quick else ""))
    mnist = (steps_result or {}).get("figures", {}).get("mnist", {})
    if mnist.get("m") == m and all(k in mnist.get("steps", {}) for k in ("TD", "RS1", "UE", "TC", "TC-sample")):
        base = mnist["steps"]
        meta["params"]["step_costs_from"] = (
            f"bench/results/{steps_result['benchmark']}.json ({steps_result['meta']['date_utc']} UTC)"  # type: ignore[index]
        )
    else:
        base = measure({"m": m, "steps": ["RS1", "UE", "TC", "TC-sample"], "B": DEFAULTS["buffer_size"]})["steps"]
    ue_by_b = {DEFAULTS["buffer_size"]: base["UE"]}
    failures: dict[str, str] = {}
    for b in grid["buffer_size"]:
        if b not in ue_by_b:
            try:
                ue_by_b[b] = measure({"m": m, "steps": ["UE"], "B": b})["steps"]["UE"]
            except TwoPartyError as exc:  # e.g. a party killed for lack of memory on a shared machine
                failures[f"UE B={b}"] = str(exc).strip().splitlines()[-1][:200]
                print(f"   UE with B={b}: FAILED {failures[f'UE B={b}']}", flush=True)
                continue
        print(f"   UE with B={b}: {ue_by_b[b]['wall_s']:.1f} s", flush=True)
    cost: dict[str, list[dict[str, Any]]] = {}
    for name in grid:
        for row in quality[name]:
            b = row["value"] if name == "buffer_size" else DEFAULTS["buffer_size"]
            if b not in ue_by_b:
                continue
            cost.setdefault(name, []).append(
                {
                    "value": row["value"],
                    "tc_full": job_cost(base, ue_by_b[b], row["rounds"], "TC"),
                    "tc_sample": job_cost(base, ue_by_b[b], row["rounds"], "TC-sample"),
                }
            )
    figures = {
        "quality": quality,
        "cost": cost,
        "steps": base,
        "ue_by_buffer": {str(b): c for b, c in ue_by_b.items()},
        "model_size": m,
        "failures": failures,
    }
    write_result(NAME + ("_quick" if quick else ""), meta, figures)
    return figures
