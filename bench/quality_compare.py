"""Forgetting quality of every method (the analogue of the paper's Figure 3), over seeds.

For each seed: one trained history on real MNIST (the 5k subset: 4,000 training and 1,000
test images; 20 clients, one target with a backdoor, 40 FedAvg rounds), then every
registered strategy in plaintext (`evaluation.experiment.Experiment`) and Starfish also
under 2PC (dealer + two party processes, `bench.whole_job.unlearn`). Metrics of the
unlearned model: TER, BA-ASR, MIA-ASR (percent), ARP, and wall time.

Model: a 784-64-10 MLP (50,890 parameters). Training the paper's CNN for ten methods ×
three seeds does not fit the benchmark's time on 2 CPU cores; the 2PC costs at the CNN's
size are measured by `bench.unlearning_cost` and `bench.whole_job`.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict
from typing import Any

import torch

from bench.env import single_thread, stamp, write_result
from bench.histories import cached_simulation
from bench.whole_job import unlearn
from mpc.cluster import ClusterConfig, TwoPartyCluster

NAME = "quality_compare"
SEEDS_FULL = (0, 1, 2)
SEEDS_QUICK = (0,)
STARFISH_PARAMS = {"sigma": 0.6, "alpha": 0.4, "beta": 0.1, "buffer_size": 2, "recovery_rounds": 0}
METRICS = ("ter", "ba_asr", "mia_asr")


def history_config(quick: bool, seed: int) -> Any:
    from evaluation.simulator import SimulationConfig

    if quick:
        return SimulationConfig(dataset="digits", num_clients=20, rounds=20, seed=seed)
    return SimulationConfig(dataset="mnist5k", architecture="mnist_mlp", num_clients=20, rounds=40, seed=seed)


def _row(metrics: dict[str, float], arp: float, seconds: float) -> dict[str, float]:
    return {**{k: 100.0 * float(metrics[k]) for k in METRICS}, "arp": float(arp), "seconds": float(seconds)}


def one_seed(quick: bool, seed: int, cluster: TwoPartyCluster) -> dict[str, dict[str, float]]:
    """Every method's metrics on the history of `seed`."""
    from evaluation.experiment import Experiment
    from evaluation.unlearning_metrics import Evaluator
    from mpc.plain_backend import PlainBackend
    from unlearning.registry import names as strategy_names

    config = history_config(quick, seed)
    result = cached_simulation(config)
    experiment = Experiment(result)  # type: ignore[arg-type]
    backend = PlainBackend()  # one backend: the experiment shares the history once per backend
    rows: dict[str, dict[str, float]] = {"before": _row(Evaluator(result).evaluate(result.models[-1]), 0.0, 0.0)}  # type: ignore[arg-type,attr-defined]
    for name in strategy_names():
        params = STARFISH_PARAMS if name == "starfish" else {}
        try:
            with single_thread():
                out = experiment.run(name, backend, params, with_gap=False)
        except Exception as exc:  # noqa: BLE001 - one failing method must not hide the others
            print(f"   seed {seed} {name}: FAILED {type(exc).__name__}: {exc}", flush=True)
            rows[name] = {"failed": 1.0}
            continue
        if out["metrics"].get("diverged"):
            rows[name] = {"diverged": 1.0}
            continue
        label = "starfish (plaintext)" if name == "starfish" else name
        rows[label] = _row(out["metrics"], out["arp_percent"], out["seconds"])
        print(
            f"   seed {seed} {label:22s} TER {rows[label]['ter']:5.1f} BA-ASR {rows[label]['ba_asr']:5.1f} "
            f"MIA {rows[label]['mia_asr']:5.1f} ARP {rows[label]['arp']:5.1f}",
            flush=True,
        )
    secure, _ = cluster.run(unlearn, asdict(config), STARFISH_PARAMS, seed)
    model = torch.from_numpy(secure["model"])
    rows["starfish (2PC)"] = _row(experiment.evaluator.evaluate(model), secure["arp_percent"], secure["wall_s"])
    print(
        f"   seed {seed} starfish (2PC)         TER {rows['starfish (2PC)']['ter']:5.1f} "
        f"BA-ASR {rows['starfish (2PC)']['ba_asr']:5.1f}",
        flush=True,
    )
    return rows


def summarize(per_seed: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, dict[str, float]]]:
    """Mean, sample standard deviation, min and max of every metric per method."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    methods = [m for m in per_seed[0] if all(m in s and "ter" in s[m] for s in per_seed)]
    for method in methods:
        out[method] = {}
        for key in (*METRICS, "arp", "seconds"):
            vals = [s[method][key] for s in per_seed]
            out[method][key] = {
                "mean": statistics.fmean(vals),
                "std": statistics.stdev(vals) if len(vals) > 1 else 0.0,
                "min": min(vals),
                "max": max(vals),
            }
    return out


def run(quick: bool = False) -> dict[str, Any]:
    seeds = SEEDS_QUICK if quick else SEEDS_FULL
    meta = stamp(
        {
            "seeds": list(seeds),
            "simulation": asdict(history_config(quick, seeds[0])),
            "starfish": STARFISH_PARAMS,
            "quick": quick,
        }
    )
    per_seed = []
    with TwoPartyCluster(timeout=3600.0, config=ClusterConfig(session_timeout_s=600.0)) as cluster:
        for seed in seeds:
            per_seed.append(one_seed(quick, seed, cluster))
    diverged = {m: sum(1 for s in per_seed if m in s and "ter" not in s[m]) for m in per_seed[0]}
    figures = {
        "seeds": list(seeds),
        "per_seed": per_seed,
        "summary": summarize(per_seed),
        "diverged": {m: n for m, n in diverged.items() if n},
        "nan_free": all(math.isfinite(v) for s in per_seed for r in s.values() for v in r.values()),
    }
    write_result(NAME + ("_quick" if quick else ""), meta, figures)
    return figures
