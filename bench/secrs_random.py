"""Does SecRS (Starfish Algorithm 2) select better rounds than a uniform random draw?

For each history (the `bench.quality_matrix` federation on 5k MNIST, seeds 0-7, or on full
MNIST with `--dataset mnist`; IID and Dirichlet β = 0.5) and each Starfish setting of
`SETTINGS` (σ < 1: at σ = 1 both select every round), Starfish runs once with SecRS and
`DRAWS` times with random selection (the `random` strategy: the same algorithm over ⌈σT⌉
rounds drawn uniformly with draw seeds 0..DRAWS−1). Paired per history: d = metric(SecRS) −
mean over draws of metric(random), for TER and BA-ASR (points; negative: SecRS better).
Reported per (dataset/partition, setting): mean ± std of d over histories, the number of
histories where SecRS is better, and the spread of the random draws. Rows of other
datasets already in the file are kept; `stamps` holds each case's date and load.

    .venv/bin/python -m bench.secrs_random                                   # 5k MNIST
    .venv/bin/python -m bench.secrs_random --dataset mnist --seeds 0,1,2 \
        --settings "σ 0.6, β 0.4, R 1;σ 0.8, β 0.4, R 1"                     # full MNIST
    python -m bench secrs_random [--quick]
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

from bench.env import load_average, read_result, single_thread, stamp, write_result
from bench.histories import cached_simulation
from bench.quality_matrix import METRICS, QUICK_SETTING, SETTING, case_config, mean_std, percent
from bench.starfish_defaults import reference

NAME = "secrs_random"
SEEDS = tuple(range(8))
PARTITIONS = ("iid", "dirichlet")
DRAWS = 5
#: name -> Starfish parameters shared by SecRS and random selection
SETTINGS: dict[str, dict[str, Any]] = {
    "paper: σ 0.6, β 0.1": {"sigma": 0.6, "alpha": 0.4, "beta": 0.1, "buffer_size": 2, "recovery_rounds": 0},
    "σ 0.6, β 0.4, R 1": {"sigma": 0.6, "alpha": 0.4, "beta": 0.4, "buffer_size": 2, "recovery_rounds": 1},
    "σ 0.8, β 0.4, R 1": {"sigma": 0.8, "alpha": 0.4, "beta": 0.4, "buffer_size": 2, "recovery_rounds": 1},
}


def one_history(
    dataset: str, partition: str, seed: int, draws: int, quick: bool, settings: list[str]
) -> dict[str, Any]:
    """SecRS and `draws` random draws per setting on one history; metrics in percent."""
    from evaluation.experiment import Experiment
    from mpc.plain_backend import PlainBackend

    config = case_config(dataset, partition, seed, quick)
    result = cached_simulation(config)
    exp = Experiment(result, reference(config, result))  # type: ignore[arg-type]
    backend = PlainBackend()
    out: dict[str, Any] = {"retrain": percent(exp.evaluator.evaluate(exp.reference()))}
    for name in settings:
        params = SETTINGS[name]
        secrs = exp.run("starfish", backend, params, with_gap=False)
        rows: dict[str, Any] = {"secrs": {**percent(secrs["metrics"]), "rounds": secrs.get("selected_rounds")}}
        rows["random"] = []
        for draw in range(draws):
            rand = exp.run("random", backend, {**params, "seed": draw}, with_gap=False)
            rows["random"].append({**percent(rand["metrics"]), "rounds": rand.get("selected_rounds")})
        out[name] = rows
        print(
            f"{dataset}/{partition} seed {seed} {name}: SecRS TER {rows['secrs']['ter']:.2f}, random TER "
            + ", ".join(f"{r['ter']:.2f}" for r in rows["random"]),
            flush=True,
        )
    return out


def summary(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per (dataset/partition, setting): paired differences SecRS − mean(random) over histories."""
    out: dict[str, Any] = {}
    for partition, histories in runs.items():
        for name in SETTINGS:
            pairs = [h[name] for h in histories.values() if name in h]
            if not pairs:
                continue
            stats: dict[str, Any] = {"histories": len(pairs), "draws": len(pairs[0]["random"])}
            for key in METRICS:
                diffs = [p["secrs"][key] - statistics.fmean(r[key] for r in p["random"]) for p in pairs]
                stats[key] = {
                    "secrs": mean_std([p["secrs"][key] for p in pairs]),
                    "random": mean_std([r[key] for p in pairs for r in p["random"]]),
                    "diff": mean_std(diffs),
                    "secrs_better": sum(1 for d in diffs if d < 0),
                    "secrs_worse": sum(1 for d in diffs if d > 0),
                }
            out.setdefault(partition, {})[name] = stats
    return out


def run(quick: bool = False) -> dict[str, Any]:
    """`starfish bench` entry (quick: the digits federation, IID, seeds 0-1, two draws)."""
    main(["--quick"] if quick else [])
    result = read_result(NAME + ("_quick" if quick else ""))
    return result["figures"] if result else {}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="mnist5k", help="mnist5k or mnist (full MNIST)")
    p.add_argument("--partitions", default=",".join(PARTITIONS))
    p.add_argument("--settings", default=";".join(SETTINGS), help="names of SETTINGS, separated by ;")
    p.add_argument("--seeds", default=",".join(map(str, SEEDS)))
    p.add_argument("--draws", type=int, default=DRAWS)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    name = NAME + ("_quick" if args.quick else "")
    partitions = ["iid"] if args.quick else args.partitions.split(",")
    seeds = [0, 1] if args.quick else [int(s) for s in args.seeds.split(",")]
    draws = 2 if args.quick else args.draws
    dataset = "digits" if args.quick else args.dataset
    setting = QUICK_SETTING if args.quick else {**SETTING, "dataset": dataset}
    meta = stamp({"setting": setting, "settings": SETTINGS, "draws": draws})
    previous = read_result(name)
    runs: dict[str, Any] = previous["figures"]["runs"] if previous else {}
    stamps: dict[str, Any] = previous["figures"].get("stamps", {}) if previous else {}  # each case's own stamp
    with single_thread():
        for partition in partitions:
            for seed in seeds:
                case = runs.setdefault(f"{dataset}/{partition}", {})
                case[str(seed)] = one_history(dataset, partition, seed, draws, args.quick, args.settings.split(";"))
                stamps[f"{dataset}/{partition}"] = {**meta, "load_average_now": load_average()}
                write_result(name, meta, {"runs": runs, "summary": summary(runs), "stamps": stamps})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
