"""Forgetting quality of every method per (dataset, partition, seed), against retraining.

Cases: full MNIST (60,000 training / 10,000 test images, the `mnist` package) and the 5k
MNIST subset (4,000 / 1,000), each split IID and Dirichlet non-IID (β = 0.5), seeds 0, 1, 2.
Each (case, seed) trains one history (cached in bench/.cache/ with its retrain reference)
and runs every method of `METHODS` on it (plaintext backend; the 2PC backend runs the same
algorithm and is checked against it by the equivalence tests). Figures per method: TER,
BA-ASR, MIA-ASR (percent), ARP (from the oracle's gradient requests), wall time, and the
TER / BA-ASR differences to the retrain reference (exact FedAvg from M_0 without the
target, same data orders).

Setting (`SETTING`): the 784-64-10 MLP (50,890 parameters), 20 clients, T = 20 FedAvg
rounds, η_l = 0.1, 1 local epoch, batch 64, one target with two triggered copies of its
data. The paper's CNN (`--architecture mnist_cnn`) runs the shipped Starfish defaults on 5k
MNIST IID only: every method on twelve CNN histories does not fit two shared CPU cores.

    .venv/bin/python -m bench.quality_matrix                      # every case, seeds 0-2
    .venv/bin/python -m bench.quality_matrix --datasets mnist5k --seeds 0
    .venv/bin/python -m bench.quality_matrix --datasets mnist5k --partitions iid --architecture mnist_cnn \
        --methods starfish-defaults                               # the paper's CNN (rows "mnist5k/iid/mnist_cnn")
    .venv/bin/python -m bench.quality_matrix --datasets mnist5k --rounds 40 --methods starfish-defaults  # T = 40
    .venv/bin/python -m bench.quality_matrix --datasets mnist5k --partitions iid --seeds 0 --two-party \
        --methods starfish-defaults,fedrecover,crab                # the 2PC column (rows "<method>-2pc")
    .venv/bin/python -m bench.quality_matrix --plot               # redraw the figure, print the tables
    python -m bench quality_matrix [--quick]

Adds every row to bench/results/quality_matrix.json as soon as it is measured (rows of
other cases and seeds already there are kept).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.env import load_average, read_result, single_thread, stamp, write_result
from bench.histories import cached_simulation
from bench.starfish_defaults import reference

NAME = "quality_matrix"
FIGURE = Path(__file__).resolve().parent.parent / "docs" / "figures" / "quality_matrix.png"
#: the Stage I federation of every case (dataset and partition vary)
SETTING: dict[str, Any] = {
    "architecture": "mnist_mlp",
    "num_clients": 20,
    "rounds": 20,
    "lr": 0.1,
    "local_epochs": 1,
    "batch_size": 64,
    "dirichlet_beta": 0.5,
}
QUICK_SETTING: dict[str, Any] = {"dataset": "digits", "num_clients": 8, "rounds": 20, "lr": 0.5, "batch_size": 32}
DATASETS = ("mnist5k", "mnist")
PARTITIONS = ("iid", "dirichlet")
SEEDS = (0, 1, 2)
#: σ 1, β 0.4, one recovery round (the `make demo` setting at T = 15 before the defaults changed)
STARFISH = {"sigma": 1.0, "alpha": 0.4, "beta": 0.4, "buffer_size": 2, "recovery_rounds": 1}
#: σ 1 selects every round, so SecRS and random selection are compared at σ 0.6
SIGMA06 = {**STARFISH, "sigma": 0.6}
#: row name -> (strategy, parameters); baselines run with their defaults (docs/BASELINES.md)
METHODS: dict[str, tuple[str, dict[str, Any]]] = {
    "starfish-defaults": ("starfish", {}),  # what a job gets with no parameters (unlearning.starfish.params)
    "starfish-paper": ("starfish", {"sigma": 0.6, "beta": 0.1, "recovery_rounds": 0}),  # the paper's §VI-A
    "starfish": ("starfish", STARFISH),
    "starfish-R2": ("starfish", {**STARFISH, "recovery_rounds": 2}),
    "starfish-b0.3": ("starfish", {**STARFISH, "beta": 0.3}),
    "starfish-R0": ("starfish", {**STARFISH, "recovery_rounds": 0}),
    "starfish-b0.3-R0": ("starfish", {**STARFISH, "beta": 0.3, "recovery_rounds": 0}),
    "starfish-s0.6": ("starfish", SIGMA06),
    "random-s0.6": ("random", SIGMA06),
    "fedrecover": ("fedrecover", {}),
    "federaser": ("federaser", {}),
    "crab": ("crab", {}),
    "puf": ("puf", {}),
    "fedadp": ("fedadp", {}),
}
QUICK_METHODS = ("starfish", "random-s0.6")
METRICS = ("ter", "ba_asr", "mia_asr")
#: the Starfish goal: TER and BA-ASR at most this many points above retraining, ARP at least
GOAL_POINTS, GOAL_ARP = 1.0, 70.0
#: row-name suffix of a method run under 2PC (`--two-party`)
SUFFIX_2PC = "-2pc"


def case_config(
    dataset: str, partition: str, seed: int, quick: bool = False, architecture: str = "", rounds: int = 0
) -> Any:
    from evaluation.simulator import SimulationConfig

    setting = {**SETTING, **QUICK_SETTING} if quick else {**SETTING, "dataset": dataset}
    if quick:
        setting.pop("architecture")
    elif architecture:
        setting["architecture"] = architecture
    if rounds:
        setting["rounds"] = rounds
    return SimulationConfig(partition=partition, seed=seed, **setting).resolved()


def case_name(dataset: str, partition: str, architecture: str = "", rounds: int = 0) -> str:
    """The case's name: "mnist5k/iid" in the matrix's setting; "/mnist_cnn" or "/T40" appended
    for another architecture or another number of stored rounds."""
    name = f"{dataset}/{partition}"
    if architecture not in ("", SETTING["architecture"]):
        name += f"/{architecture}"
    return name + (f"/T{rounds}" if rounds and rounds != SETTING["rounds"] else "")


def percent(metrics: dict[str, Any]) -> dict[str, float]:
    return {k: 100.0 * float(metrics[k]) for k in METRICS}


def with_gaps(row: dict[str, float], retrain: dict[str, float]) -> dict[str, float]:
    """The row with its TER / BA-ASR / MIA-ASR differences to retraining (points)."""
    return {**row, **{f"{k}_gap": row[k] - retrain[k] for k in METRICS}}


def run_case(
    config: Any, methods: list[str], save: Callable[[str, dict[str, Any]], None], two_party: bool = False
) -> None:
    """Train (or load) the history of `config`, then measure every method on it; `save(row name, row)`.

    `two_party`: each method also runs under 2PC (dealer and two party processes,
    `evaluation.mpc_run`) on the same history; its row is "<method>-2pc", with the relative
    L2 distance of its model to the plaintext run's (the anchored noise is drawn under
    each backend's own key, so the two models differ by it)."""
    from evaluation.experiment import Experiment, execute
    from evaluation.mpc_run import run_mpc
    from mpc.plain_backend import PlainBackend

    result = cached_simulation(config)
    exp = Experiment(result, reference(config, result))  # type: ignore[arg-type]
    retrain = percent(exp.evaluator.evaluate(exp.reference()))
    save("retrain", with_gaps({**retrain, "arp": 0.0}, retrain))
    save("before", with_gaps({**percent(exp.evaluator.evaluate(result.models[-1])), "arp": 0.0}, retrain))  # type: ignore[attr-defined]
    backend = PlainBackend()
    for label in methods:
        strategy, params = METHODS[label]
        params = {**params, "seed": config.seed} if strategy == "random" else params
        row_name = label
        try:
            plain = execute(result, strategy, backend, exp.history_for(backend), params, probe=exp.probe)
            save(label, measured(exp, plain, retrain))
            if two_party:
                row_name = label + SUFFIX_2PC
                secure = run_mpc(result, strategy, params)
                gap = relative_gap(secure.model, plain.model)
                save(row_name, {**measured(exp, secure, retrain), "model_gap_to_plaintext": gap})
        except Exception as exc:  # noqa: BLE001 - one failing method must not hide the others
            save(row_name, {"failed": f"{type(exc).__name__}: {exc}"})


def measured(exp: Any, outcome: Any, retrain: dict[str, float]) -> dict[str, Any]:
    """The row of one finished run: metrics (percent), ARP, seconds and the gaps to retraining."""
    out = exp.measure(outcome, with_gap=False)
    if out["metrics"].get("diverged"):
        return {"failed": "diverged (non-finite model)"}
    row = {**percent(out["metrics"]), "arp": float(out["arp_percent"]), "seconds": float(out["seconds"])}
    return with_gaps(row, retrain)


def relative_gap(model: Any, reference_model: Any) -> float:
    """‖M − M_ref‖ / ‖M_ref‖ of two flat models."""
    return float((model.double() - reference_model.double()).norm() / reference_model.double().norm())


def mean_std(values: list[float]) -> dict[str, float]:
    """{"mean", "std"} of a list (std 0 for one value)."""
    return {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0}


def summary(runs: dict[str, Any]) -> dict[str, Any]:
    """Mean ± std over seeds per (case, method), and whether the mean meets the Starfish goal."""
    out: dict[str, Any] = {}
    for case, seeds in runs.items():
        names = {m for rows in seeds.values() for m in rows}
        for method in sorted(names):
            rows = [s[method] for s in seeds.values() if "ter" in s.get(method, {})]
            if not rows:
                continue
            stats = {k: mean_std([r[k] for r in rows]) for k in (*METRICS, "arp", "ter_gap", "ba_asr_gap")}
            meets = (
                stats["ter_gap"]["mean"] <= GOAL_POINTS
                and stats["ba_asr_gap"]["mean"] <= GOAL_POINTS
                and stats["arp"]["mean"] >= GOAL_ARP - 1e-9  # ARP is (T − T_r)/T: 70 % is 14/20 in floats
            )
            failed = sum(1 for s in seeds.values() if "failed" in s.get(method, {}))
            out.setdefault(case, {})[method] = {"seeds": len(rows), "failed": failed, **stats, "goal_met": meets}
    return out


def run(quick: bool = False) -> dict[str, Any]:
    """`starfish bench` entry (quick: digits, IID, seed 0, Starfish and random selection)."""
    main(["--quick"] if quick else [])
    result = read_result(NAME + ("_quick" if quick else ""))
    return result["figures"] if result else {}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--datasets", default=",".join(DATASETS))
    p.add_argument("--partitions", default=",".join(PARTITIONS))
    p.add_argument("--seeds", default=",".join(map(str, SEEDS)))
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--architecture", default="", help="another model than the MLP (e.g. mnist_cnn, the paper's)")
    p.add_argument("--rounds", type=int, default=0, help="another T than the matrix's 20 stored rounds")
    p.add_argument("--two-party", action="store_true", help="also run each method under 2PC (rows <method>-2pc)")
    p.add_argument("--quick", action="store_true", help="digits federation, IID, seed 0, two methods")
    p.add_argument("--plot", action="store_true", help="only redraw the figure and print the tables (docs)")
    args = p.parse_args(argv)
    if args.plot:
        from bench.quality_matrix_report import defaults_table, plot, secrs_table, table

        result, secrs = read_result(NAME), read_result("secrs_random")
        plot(result, FIGURE, list(METHODS))
        tables = (table(result), defaults_table(result)) if result else ()
        print(*tables, secrs_table(secrs) if secrs else "", sep="\n\n")
        return 0
    name = NAME + ("_quick" if args.quick else "")
    datasets = ["digits"] if args.quick else args.datasets.split(",")
    partitions = ["iid"] if args.quick else args.partitions.split(",")
    seeds = [0] if args.quick else [int(s) for s in args.seeds.split(",")]
    methods = list(QUICK_METHODS) if args.quick else args.methods.split(",")
    meta = stamp({"setting": QUICK_SETTING if args.quick else SETTING, "methods": METHODS, "seeds": SEEDS})
    for dataset in datasets:
        for partition in partitions:
            for seed in seeds:
                config = case_config(dataset, partition, seed, args.quick, args.architecture, args.rounds)
                case = case_name(dataset, partition, args.architecture, args.rounds)
                run_one(name, meta, case, config, methods, args.two_party)
    return 0


def run_one(
    name: str, meta: dict[str, Any], case: str, config: Any, methods: list[str], two_party: bool = False
) -> None:
    """Measure one (case, seed) and add its rows to bench/results/<name>.json as they come."""
    seed = str(config.seed)
    start, load, date = time.perf_counter(), load_average(), time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())

    def save(label: str, row: dict[str, Any]) -> None:
        previous = read_result(name)
        runs = previous["figures"]["runs"] if previous else {}
        rows = runs.setdefault(case, {}).setdefault(seed, {})
        rows[label] = row
        runs_of = rows.setdefault("_runs", {})  # wall time and load of each invocation on this history
        runs_of[",".join(methods) + SUFFIX_2PC * two_party] = {
            "date_utc": date,
            "load_average_start": load,
            "wall_s": time.perf_counter() - start,
        }
        print(
            f"{case} seed {seed} {label}: "
            + ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()),
            flush=True,
        )
        write_result(name, meta, {"runs": runs, "summary": summary(runs)})

    with single_thread():
        run_case(config, methods, save, two_party)


if __name__ == "__main__":
    raise SystemExit(main())
