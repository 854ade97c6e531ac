"""Starfish's defaults against retraining: which (σ, β, recovery rounds) close the TER gap.

Cases (plaintext backend, IID, one backdoored target with two triggered copies of its data;
the MNIST cases use the paper's 582,026-parameter CNN on the 5k subset):

* `demo` — the `make demo` federation as it was until T became 20: 10 clients, T = 15 rounds, η_l = 0.1, 1 local epoch;
* `iid`  — 20 clients, T = 20 rounds, η_l = 0.1, 1 local epoch;
* `digits` — sklearn digits, the 2,410-parameter MLP, 8 clients, T = 20, η_l = 0.5, batch 32
  (the federation of tests/evaluation/test_starfish_forgetting.py).

Each (case, seed) trains one history (cached in bench/.cache/ with its retrain reference)
and runs every variant of `VARIANTS` on it; the figures are TER, BA-ASR, MIA-ASR (percent),
ARP (measured from the oracle's requests) and their differences to retrain.

    .venv/bin/python -m bench.starfish_defaults                       # every case, seeds 0 and 1
    .venv/bin/python -m bench.starfish_defaults --cases demo --seeds 0 --variants paper,sigma1-beta0.4
    python -m bench starfish_defaults [--quick]

Adds every row to bench/results/starfish_defaults.json as soon as it is measured (rows of other
cases and seeds already there are kept, so cases can run in separate processes).
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from typing import Any

import torch

from bench.env import read_result, single_thread, stamp, write_result
from bench.histories import _cache_paths, cached_simulation

NAME = "starfish_defaults"
#: name -> Starfish parameters (B = 2 and α = 0.4 throughout; α is the clients' Stage I setting)
VARIANTS: dict[str, dict[str, Any]] = {
    "paper": {"sigma": 0.6, "beta": 0.1, "recovery_rounds": 0},
    "sigma1-beta0.4": {"sigma": 1.0, "beta": 0.4, "recovery_rounds": 0},
    "sigma0.6-beta1-R2": {"sigma": 0.6, "beta": 1.0, "recovery_rounds": 2},
    "sigma1-beta0.5-R1": {"sigma": 1.0, "beta": 0.5, "recovery_rounds": 1},
    "sigma0.8-beta0.5-R1": {"sigma": 0.8, "beta": 0.5, "recovery_rounds": 1},
    "sigma1-beta0.4-R2": {"sigma": 1.0, "beta": 0.4, "recovery_rounds": 2},
    "sigma0.6-beta0.4": {"sigma": 0.6, "beta": 0.4, "recovery_rounds": 0},
    "sigma0.6-beta0.4-R3": {"sigma": 0.6, "beta": 0.4, "recovery_rounds": 3},
    "sigma1-beta0.4-R1": {"sigma": 1.0, "beta": 0.4, "recovery_rounds": 1},
    "sigma1-beta0.3": {"sigma": 1.0, "beta": 0.3, "recovery_rounds": 0},
    "sigma1-beta0.3-R1": {"sigma": 1.0, "beta": 0.3, "recovery_rounds": 1},
}
CASES: dict[str, dict[str, Any]] = {
    "demo": {
        "dataset": "mnist5k",
        "architecture": "mnist_cnn",
        "num_clients": 10,
        "rounds": 15,
        "lr": 0.1,
        "local_epochs": 1,
    },
    "iid": {
        "dataset": "mnist5k",
        "architecture": "mnist_cnn",
        "num_clients": 20,
        "rounds": 20,
        "lr": 0.1,
        "local_epochs": 1,
    },
    "digits": {"dataset": "digits", "num_clients": 8, "rounds": 20, "lr": 0.5, "local_epochs": 1, "batch_size": 32},
}


def case_config(case: str, seed: int) -> Any:
    from evaluation.simulator import SimulationConfig

    return SimulationConfig(seed=seed, **CASES[case]).resolved()


def reference(config: Any, result: Any) -> torch.Tensor:
    """M_retrain of the cached history (computed once, stored beside it)."""
    meta, _ = _cache_paths(config)
    path = meta.with_name(meta.stem + "-retrain.pt")
    if not path.exists():
        torch.save(result.retrain_models()[-1], path)
    return torch.load(path)


def _percent(metrics: dict[str, Any]) -> dict[str, float]:
    return {k: 100.0 * float(metrics[k]) for k in ("ter", "ba_asr", "mia_asr")}


def run_case(
    case: str, seed: int, variants: list[str], save: Callable[[str, str, str, dict[str, float]], None]
) -> None:
    """Every variant on the history of (case, seed); `save(case, seed, row name, row)` keeps each row."""
    from evaluation.experiment import Experiment
    from mpc.plain_backend import PlainBackend

    config = case_config(case, seed)
    result = cached_simulation(config)
    exp = Experiment(result, reference(config, result))  # type: ignore[arg-type]
    backend = PlainBackend()
    retrain = _percent(exp.evaluator.evaluate(exp.reference()))
    save(case, str(seed), "retrain", retrain)
    save(case, str(seed), "before", _percent(exp.evaluator.evaluate(result.models[-1])))  # type: ignore[attr-defined]
    for name in variants:
        out = exp.run("starfish", backend, {"alpha": 0.4, "buffer_size": 2, **VARIANTS[name]})
        row = {**_percent(out["metrics"]), "arp": out["arp_percent"], "seconds": out["seconds"]}
        row.update({f"{k}_gap": row[k] - retrain[k] for k in ("ter", "ba_asr")})
        print(f"{case} seed {seed} {name}: " + ", ".join(f"{k} {v:.2f}" for k, v in row.items()), flush=True)
        save(case, str(seed), name, row)


def summary(figures: dict[str, Any]) -> dict[str, Any]:
    """Mean and standard deviation over seeds of each variant's gaps and ARP, per case."""
    out: dict[str, Any] = {}
    for case, seeds in figures.items():
        for name in VARIANTS:
            rows = [s[name] for s in seeds.values() if name in s]
            if not rows:
                continue
            stats = {}
            for key in ("ter_gap", "ba_asr_gap", "arp", "ter"):
                values = [r[key] for r in rows]
                stats[key] = (statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0)
            out.setdefault(case, {})[name] = {"seeds": len(rows), **stats}
    return out


def run(quick: bool = False) -> dict[str, Any]:
    """`starfish bench` entry: every case, seeds 0 and 1, every variant (quick: the demo
    case, seed 0, the paper's setting and the demo's); returns the figures written."""
    if quick:
        main(["--cases", "demo", "--seeds", "0", "--variants", "paper,sigma1-beta0.4"])
    else:
        main([])
    result = read_result(NAME)
    return result["figures"] if result else {}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--seeds", default="0,1")
    p.add_argument("--variants", default=",".join(VARIANTS))
    args = p.parse_args(argv)
    cases = args.cases.split(",")
    seeds = [int(s) for s in args.seeds.split(",")]
    variants = args.variants.split(",")
    meta = stamp({"cases": CASES, "variants": VARIANTS})

    def save(case: str, seed: str, name: str, row: dict[str, float]) -> None:
        """Add one row to the results file (rows of other cases and seeds, from other runs, are kept)."""
        previous = read_result(NAME)
        figures = previous["figures"]["runs"] if previous else {}
        figures.setdefault(case, {}).setdefault(seed, {})[name] = row
        write_result(NAME, meta, {"runs": figures, "summary": summary(figures)})

    with single_thread():
        for case in cases:
            for seed in seeds:
                run_case(case, seed, variants, save)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
