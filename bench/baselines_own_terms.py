"""PUF, FedADP and FedEraser measured the way their papers measure them, beside our
backdoor metrics (TER, BA-ASR, MIA-ASR, ARP).

* PUF (its §V): ten clients with label-skewed data (Dirichlet/LDA α = 0.3, the paper's
  CIFAR-10 setting), one local epoch, batch 32; the target is client-00 of each seed's
  partition, so every seed forgets a different client, most of whose images belong to
  one to three classes. Metrics are the paper's: test accuracy, forget accuracy (on the
  target's own images), the loss MIA (Yeom) and the confidence MIA (Song), each beside
  the retrained model's, after recovery until the model first reaches the retrained
  model's test accuracy (the probe here is the whole test split; at most 30 rounds); the
  recovery rounds are the cost. Run once on
  natural data (the paper's case) and once with the target backdoored (ours).
* FedADP (its §VI): the project's standard federation (twenty IID clients, forty rounds,
  one backdoored target). Clients privatize every upload with the adaptive Gaussian
  mechanism at each privacy budget ε_max (ε_0 = ε_min = ε_max/3, the 1 : 3 ratio of our
  defaults; the paper sweeps ε_max from 2 to 4.5 and uses 3) and clip norm S (not given
  in the paper: S = 1 and S = 5, about the median upload norm), over three noise seeds.
  Reported: the DP-trained model, retraining under the same mechanism, FedADP on the
  privatized history, and FedADP without DP on the clean history, beside clean retraining.
* FedEraser: the standard federation, retaining interval Δt = 1 (what the PUF paper
  tuned to) and Δt = 2 (FedEraser's default), with the clients' regular local training
  and with the paper's calibration ratio r = 0.5 (one of two local epochs).
* A case none of the three was set up on: twenty clients with Dirichlet (β = 0.5)
  label skew, two backdoored targets, every method with its paper's defaults (PUF with
  its stopping rule and its Natural baseline, FedEraser Δt = 1 and 2, FedADP without DP).

    python -m bench baselines_own_terms           # full: 3 seeds, 5k MNIST, MLP
    python -m bench baselines_own_terms --quick   # digits, one seed
    python -m bench.baselines_own_terms --section unseen  # one section again, keeping the others

Writes bench/results/baselines_own_terms.json (after each section, so an interrupted run
keeps what it finished), with seeds, settings, load averages and the process CPU time,
and (full run) docs/figures/baselines_fedadp.png.
"""

from __future__ import annotations

import resource
import statistics
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np

from bench.env import load_average, read_result, single_thread, stamp, write_result

FIGURE = Path(__file__).resolve().parent.parent / "docs" / "figures" / "baselines_fedadp.png"

NAME = "baselines_own_terms"
SEEDS_FULL = (0, 1, 2)
SEEDS_QUICK = (0,)
#: PUF configurations: the paper's defaults, its §V-E knobs (E_u, η_u), and its Natural baseline
PUF_VARIANTS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("natural (η_u = 0)", {"eta_u": 0.0}),
    ("special η_u = 2", {}),
    ("special η_u = 2, E_u = 5", {"unlearning_epochs": 5}),
    ("special η_u = 5", {"eta_u": 5.0}),
    ("regular η_u = 20", {"mode": "regular"}),
)
FEDERASER_VARIANTS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("Δt = 1", {"interval": 1}),
    ("Δt = 2", {"interval": 2}),
    ("Δt = 1, r = 0.5", {"interval": 1, "calibration_epochs": 1}),
    ("Δt = 2, r = 0.5", {"interval": 2, "calibration_epochs": 1}),
)
EPSILONS_FULL = (2.0, 3.0, 4.5, 30.0, 300.0, 3000.0)
EPSILONS_QUICK = (3.0, 300.0)
CLIP_NORMS = (1.0, 5.0)
METRICS = ("ter", "ba_asr", "mia_asr", "mia_confidence", "forget_accuracy")


def puf_config(quick: bool, seed: int, backdoor: bool) -> Any:
    """The PUF paper's kind of federation: label-skewed clients, E = 1, batch 32."""
    from evaluation.simulator import SimulationConfig

    copies = 2 if backdoor else 0
    if quick:
        return SimulationConfig(
            dataset="digits", num_clients=8, rounds=12, lr=0.5, local_epochs=1, batch_size=32, seed=seed,
            partition="dirichlet", dirichlet_beta=0.3, backdoor_copies=copies,
        )  # fmt: skip
    return SimulationConfig(
        dataset="mnist5k", architecture="mnist_mlp", num_clients=10, rounds=40, lr=0.05, local_epochs=1,
        batch_size=32, partition="dirichlet", dirichlet_beta=0.3, backdoor_copies=copies, seed=seed,
    )  # fmt: skip


def standard_config(quick: bool, seed: int) -> Any:
    """The project's standard quality federation (as bench.quality_compare)."""
    from evaluation.simulator import SimulationConfig

    if quick:
        return SimulationConfig(
            dataset="digits", num_clients=8, rounds=12, lr=0.5, local_epochs=1, batch_size=32, seed=seed
        )
    return SimulationConfig(dataset="mnist5k", architecture="mnist_mlp", num_clients=20, rounds=40, seed=seed)


def unseen_config(quick: bool, seed: int) -> Any:
    """Label-skewed clients (Dirichlet β = 0.5) and two backdoored targets."""
    base = standard_config(quick, seed)
    return replace(base, partition="dirichlet", dirichlet_beta=0.5, num_targets=2)


def private_config(base: Any, epsilon_max: float, clip_norm: float, noise_seed: int) -> Any:
    """`base` with FedADP's upload mechanism at ε_max, S and a noise seed (ε_0 = ε_min = ε_max/3)."""
    third = epsilon_max / 3.0
    return replace(
        base,
        upload_dp=True,
        dp_clip_norm=clip_norm,
        dp_epsilon_0=third,
        dp_epsilon_min=third,
        dp_epsilon_max=epsilon_max,
        dp_noise_seed=noise_seed,
    )


def row(metrics: dict[str, float], run: dict[str, Any] | None = None, backdoor: bool = True) -> dict[str, Any]:
    """Metrics in percent (and ARP, seconds, recovery facts of a run); no BA-ASR when the
    target planted no backdoor."""
    keys = [k for k in METRICS if k in metrics and (backdoor or k != "ba_asr")]
    out: dict[str, Any] = {k: 100.0 * float(metrics[k]) for k in keys}
    if run is not None:
        out["arp"] = float(run["arp_percent"])
        out["seconds"] = float(run["seconds"])
        report = run["report"]
        for key in ("recovery_rounds", "stopped_by"):
            if key in report:
                out[key] = report[key]
    return out


def cpu_seconds() -> float:
    """User + system CPU time of this process so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def target_labels(result: Any) -> dict[str, Any]:
    """The target's class histogram and the share of its two largest classes."""
    labels = np.concatenate([y for _, y in result.federation.clean_target_data.values()])
    hist = np.bincount(labels, minlength=result.federation.dataset.num_classes)
    return {
        "samples": int(hist.sum()),
        "classes": hist.tolist(),
        "top2_share": float(np.sort(hist)[-2:].sum() / hist.sum()),
    }


def with_gaps(rows: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each row with |metric − retrain's| (the PUF paper's Δ, in points) for TER, forget
    accuracy and both MIAs."""
    reference = rows["retrain"]
    keys = ("ter", "forget_accuracy", "mia_asr", "mia_confidence")
    return {label: {**r, **{f"gap_{k}": abs(r[k] - reference[k]) for k in keys if k in r}} for label, r in rows.items()}


def puf_seed(quick: bool, seed: int, backdoor: bool) -> dict[str, Any]:
    """Original, retrain and every PUF variant on one label-skewed federation."""
    from evaluation.dataset_probe import DatasetProbe
    from evaluation.experiment import Experiment
    from evaluation.simulator import simulate
    from mpc.plain_backend import PlainBackend

    result = simulate(puf_config(quick, seed, backdoor))
    exp = Experiment(result)
    # the paper stops recovery on the test accuracy it reports: probe the whole test split
    dataset = result.federation.dataset
    exp.probe = DatasetProbe(result.config.architecture, dataset, samples=len(dataset.test_y))
    stop = exp.probe.accuracy(exp.reference())
    rows = {
        "before": row(exp.evaluator.evaluate(result.models[-1]), backdoor=backdoor),
        "retrain": row(exp.evaluator.evaluate(exp.reference()), backdoor=backdoor),
    }
    backend = PlainBackend()
    for label, params in PUF_VARIANTS:
        run = exp.run("puf", backend, {**params, "stop_accuracy": stop}, with_gap=False)
        rows[label] = row(run["metrics"], run, backdoor=backdoor)
        print(f"   puf seed {seed} {'backdoor' if backdoor else 'natural'} {label}: {rows[label]}", flush=True)
    return {"target": target_labels(result), "stop_accuracy": stop, "rows": with_gaps(rows)}


def unseen_seed(quick: bool, seed: int) -> dict[str, Any]:
    """Before, retrain and every method at its paper's defaults on the label-skewed
    federation with two backdoored targets (PUF stops on the whole test split's accuracy)."""
    from evaluation.dataset_probe import DatasetProbe
    from evaluation.experiment import Experiment
    from evaluation.simulator import simulate
    from mpc.plain_backend import PlainBackend

    result = simulate(unseen_config(quick, seed))
    exp = Experiment(result)
    dataset = result.federation.dataset
    exp.probe = DatasetProbe(result.config.architecture, dataset, samples=len(dataset.test_y))
    stop = exp.probe.accuracy(exp.reference())
    rows = {
        "before": row(exp.evaluator.evaluate(result.models[-1])),
        "retrain": row(exp.evaluator.evaluate(exp.reference())),
    }
    backend = PlainBackend()
    runs = [(f"puf {label}", "puf", {**params, "stop_accuracy": stop}) for label, params in PUF_VARIANTS]
    runs += [(f"federaser {label}", "federaser", params) for label, params in FEDERASER_VARIANTS[:2]]
    runs += [("fedadp dp=false", "fedadp", {"dp": False})]
    for label, name, params in runs:
        run = exp.run(name, backend, params, with_gap=False)
        rows[label] = row(run["metrics"], run)
        print(f"   unseen seed {seed} {label}: {rows[label]}", flush=True)
    return {"target": target_labels(result), "stop_accuracy": stop, "rows": with_gaps(rows)}


def clean_seed(quick: bool, seed: int) -> dict[str, Any]:
    """Before, retrain, FedEraser variants and FedADP without DP (and with read-time DP) on
    the standard federation of `seed`."""
    from evaluation.experiment import Experiment
    from evaluation.simulator import simulate
    from mpc.plain_backend import PlainBackend

    result = simulate(standard_config(quick, seed))
    exp = Experiment(result)
    rows = {
        "before": row(exp.evaluator.evaluate(result.models[-1])),
        "retrain": row(exp.evaluator.evaluate(exp.reference())),
    }
    backend = PlainBackend()
    runs = [(f"federaser {label}", "federaser", params) for label, params in FEDERASER_VARIANTS]
    runs += [("fedadp dp=false", "fedadp", {"dp": False}), ("fedadp read-time DP ε ≤ 3", "fedadp", {})]
    for label, name, params in runs:
        run = exp.run(name, backend, params, with_gap=False)
        rows[label] = row(run["metrics"], run)
        print(f"   seed {seed} {label}: {rows[label]}", flush=True)
    norms = np.asarray(result.norms)
    return {"rows": rows, "upload_norm_median": float(np.median(norms)), "upload_norm_max": float(norms.max())}


def private_run(quick: bool, epsilon_max: float, clip_norm: float, noise_seed: int) -> dict[str, Any]:
    """The DP-trained model, retraining under the same mechanism and FedADP on the privatized
    history (data seed 0)."""
    from evaluation.experiment import Experiment
    from evaluation.simulator import simulate
    from mpc.plain_backend import PlainBackend

    result = simulate(private_config(standard_config(quick, 0), epsilon_max, clip_norm, noise_seed))
    exp = Experiment(result, reference=result.private_retrain_models()[-1])
    run = exp.run("fedadp", PlainBackend(), {"history_privatized": True}, with_gap=False)
    privacy = result.privacy
    m = int(result.models[0].numel())
    return {
        "before": row(exp.evaluator.evaluate(result.models[-1])),
        "private retrain": row(exp.evaluator.evaluate(exp.reference())),
        "fedadp": row(run["metrics"], run),
        "budget_range": [min(privacy.budgets), max(privacy.budgets)],
        "noise_std_range": [min(privacy.noise_std), max(privacy.noise_std)],
        # ‖N(0, σ²I_m)‖ ≈ σ√m against a clipped signal of norm ≤ S
        "noise_to_signal": [s * m**0.5 / clip_norm for s in (min(privacy.noise_std), max(privacy.noise_std))],
    }


def summarize(per_seed: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, dict[str, float]]]:
    """Mean and sample standard deviation of every numeric entry, per row label."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for label in per_seed[0]:
        out[label] = {}
        for key, value in per_seed[0][label].items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                values = [float(s[label][key]) for s in per_seed]
                std = statistics.stdev(values) if len(values) > 1 else 0.0
                out[label][key] = {"mean": statistics.fmean(values), "std": std}
    return out


def fedadp_sweep(quick: bool, seeds: tuple[int, ...]) -> dict[str, Any]:
    """FedADP on privatized uploads per (S, ε_max), over noise seeds."""
    out: dict[str, Any] = {}
    for clip_norm in CLIP_NORMS:
        for epsilon_max in EPSILONS_QUICK if quick else EPSILONS_FULL:
            runs = [private_run(quick, epsilon_max, clip_norm, s) for s in seeds]
            key = f"S={clip_norm:g} eps_max={epsilon_max:g}"
            tables = [{k: r[k] for k in ("before", "private retrain", "fedadp")} for r in runs]
            out[key] = {
                "clip_norm": clip_norm,
                "epsilon_max": epsilon_max,
                "per_seed": runs,
                "summary": summarize(tables),
            }
            fedadp = out[key]["summary"]["fedadp"]
            print(f"   fedadp {key}: TER {fedadp['ter']['mean']:.1f} BA-ASR {fedadp['ba_asr']['mean']:.1f}", flush=True)
    return out


def section(name: str, fn: Any, figures: dict[str, Any], meta: dict[str, Any], quick: bool) -> None:
    """Run one section, time it (wall, CPU, load) and write the results so far."""
    print(f"== {name}", flush=True)
    start, cpu, load = time.perf_counter(), cpu_seconds(), load_average()
    with single_thread():
        figures[name] = fn()
    figures.setdefault("costs", {})[name] = {
        "wall_seconds": time.perf_counter() - start,
        "cpu_seconds": cpu_seconds() - cpu,
        "load_average_start": load,
        "load_average_end": load_average(),
    }
    write_result(NAME + ("_quick" if quick else ""), meta, figures)


def params(quick: bool) -> dict[str, Any]:
    """Every setting of the benchmark (the JSON's meta.params)."""
    seeds = SEEDS_QUICK if quick else SEEDS_FULL
    return {
        "seeds": list(seeds),
        "puf_federation": asdict(puf_config(quick, seeds[0], backdoor=False)),
        "standard_federation": asdict(standard_config(quick, seeds[0])),
        "unseen_federation": asdict(unseen_config(quick, seeds[0])),
        "puf_variants": dict(PUF_VARIANTS),
        "federaser_variants": dict(FEDERASER_VARIANTS),
        "epsilons": list(EPSILONS_QUICK if quick else EPSILONS_FULL),
        "clip_norms": list(CLIP_NORMS),
        "quick": quick,
    }


def sections(quick: bool) -> dict[str, Any]:
    """Section name → the function that measures it."""
    seeds = SEEDS_QUICK if quick else SEEDS_FULL

    def over_seeds(fn: Any) -> Any:
        def measure() -> dict[str, Any]:
            per_seed = [fn(s) for s in seeds]
            return {"per_seed": per_seed, "summary": summarize([p["rows"] for p in per_seed])}

        return measure

    return {
        "puf_natural": over_seeds(lambda s: puf_seed(quick, s, backdoor=False)),
        "puf_backdoor": over_seeds(lambda s: puf_seed(quick, s, backdoor=True)),
        "standard": over_seeds(lambda s: clean_seed(quick, s)),
        "unseen": over_seeds(lambda s: unseen_seed(quick, s)),
        "fedadp_dp": lambda: fedadp_sweep(quick, seeds),
    }


def run(quick: bool = False, only: tuple[str, ...] = ()) -> dict[str, Any]:
    """Measure every section (or only those named, keeping the others of the previous
    result when it was run with the same settings) and write the JSON, the tables and,
    on the full run, the figure."""
    settings = params(quick)
    meta = stamp(settings)
    figures: dict[str, Any] = {"seeds": settings["seeds"]}
    if only:
        from evaluation.experiment import json_ready

        previous = read_result(NAME + ("_quick" if quick else ""))
        old = (previous or {}).get("meta", {}).get("params", {})
        differ = [k for k in old if k in settings and old[k] != json_ready(settings[k])]
        if previous is None or differ:
            raise SystemExit(f"no previous result with these settings to keep (differs in {differ or 'all'})")
        figures = previous["figures"]
        meta["sections_rerun"] = list(only)
        meta["previous_runs"] = previous["meta"].get("previous_runs", []) + [
            {k: previous["meta"].get(k) for k in ("date_utc", "command", "load_average_start", "load_average_end")}
        ]
    for name, fn in sections(quick).items():
        if not only or name in only:
            section(name, fn, figures, meta, quick)
    print(markdown(figures), flush=True)
    if not quick and (not only or {"fedadp_dp", "standard"} & set(only)):
        plot_fedadp(figures, meta, FIGURE)
    return figures


def _cell(stats: dict[str, dict[str, float]], key: str) -> str:
    if key not in stats:
        return "—"
    return f"{stats[key]['mean']:.1f} ± {stats[key]['std']:.1f}"


def _table(summary: dict[str, Any], columns: tuple[tuple[str, str], ...]) -> list[str]:
    lines = ["| method | " + " | ".join(title for _, title in columns) + " |", "|" + " --- |" * (len(columns) + 1)]
    for label, stats in summary.items():
        lines.append(f"| {label} | " + " | ".join(_cell(stats, key) for key, _ in columns) + " |")
    return lines


PUF_COLUMNS = (
    ("ter", "TER %"),
    ("forget_accuracy", "forget acc. %"),
    ("gap_forget_accuracy", "Δ forget acc."),
    ("mia_asr", "MIA (loss) %"),
    ("gap_mia_asr", "Δ MIA (loss)"),
    ("mia_confidence", "MIA (conf.) %"),
    ("gap_mia_confidence", "Δ MIA (conf.)"),
    ("recovery_rounds", "recovery rounds"),
)
STANDARD_COLUMNS = (("ter", "TER %"), ("ba_asr", "BA-ASR %"), ("mia_asr", "MIA-ASR %"), ("arp", "ARP %"))
UNSEEN_COLUMNS = (
    ("ter", "TER %"),
    ("ba_asr", "BA-ASR %"),
    ("forget_accuracy", "forget acc. %"),
    ("gap_forget_accuracy", "Δ forget acc."),
    ("mia_asr", "MIA-ASR %"),
    ("gap_mia_asr", "Δ MIA-ASR"),
    ("arp", "ARP %"),
    ("recovery_rounds", "recovery rounds"),
)


def markdown(figures: dict[str, Any]) -> str:
    """The tables of docs/BASELINES.md (mean ± sample std over the seeds)."""
    out: list[str] = []
    if "puf_natural" in figures:
        out += ["PUF, natural data (its paper's protocol):", ""]
        out += _table(figures["puf_natural"]["summary"], PUF_COLUMNS) + [""]
    if "puf_backdoor" in figures:
        out += ["PUF, backdoored target:", ""]
        out += _table(figures["puf_backdoor"]["summary"], (("ba_asr", "BA-ASR %"), *PUF_COLUMNS)) + [""]
    if "standard" in figures:
        out += ["FedEraser and FedADP on clean uploads:", ""]
        out += _table(figures["standard"]["summary"], STANDARD_COLUMNS) + [""]
    if "unseen" in figures:
        out += ["Label-skewed federation with two backdoored targets:", ""]
        out += _table(figures["unseen"]["summary"], UNSEEN_COLUMNS) + [""]
    if "fedadp_dp" in figures:
        out += ["FedADP on privatized uploads (noise seeds):", ""]
        titles = ("S", "ε_max", "ε range", "noise/signal", "before TER", "before BA", "private retrain TER")
        titles += ("private retrain BA", "FedADP TER", "FedADP BA", "FedADP ARP")
        out += ["| " + " | ".join(titles) + " |", "|" + " --- |" * len(titles)]
        for entry in figures["fedadp_dp"].values():
            first = entry["per_seed"][0]
            summary = entry["summary"]
            eps = f"{first['budget_range'][0]:.3g}–{first['budget_range'][1]:.3g}"
            ratio = f"{first['noise_to_signal'][1]:.3g}–{first['noise_to_signal'][0]:.3g}"
            cells = [
                _cell(summary["before"], "ter"),
                _cell(summary["before"], "ba_asr"),
                _cell(summary["private retrain"], "ter"),
                _cell(summary["private retrain"], "ba_asr"),
                _cell(summary["fedadp"], "ter"),
                _cell(summary["fedadp"], "ba_asr"),
                _cell(summary["fedadp"], "arp"),
            ]
            out.append(
                f"| {entry['clip_norm']:g} | {entry['epsilon_max']:g} | {eps} | {ratio} | " + " | ".join(cells) + " |"
            )
    return "\n".join(out) + "\n"


def plot_fedadp(figures: dict[str, Any], meta: dict[str, Any], path: Path) -> None:
    """TER and BA-ASR against ε_max per clip norm S: the DP-trained model, retraining under
    the mechanism and FedADP (mean ± std over noise seeds), with clean retraining and
    FedADP without DP (over data seeds) as horizontal lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sweep, clean = figures["fedadp_dp"], figures["standard"]["summary"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, metric, title in zip(axes, ("ter", "ba_asr"), ("TER (%)", "BA-ASR (%)"), strict=True):
        for k, clip in enumerate(CLIP_NORMS):
            entries = sorted((e for e in sweep.values() if e["clip_norm"] == clip), key=lambda e: e["epsilon_max"])
            eps = [e["epsilon_max"] for e in entries]
            for j, (label, style) in enumerate((("before", ":"), ("private retrain", "--"), ("fedadp", "-"))):
                mean = [e["summary"][label][metric]["mean"] for e in entries]
                std = [e["summary"][label][metric]["std"] for e in entries]
                name = "FedADP" if label == "fedadp" else label
                ax.errorbar(eps, mean, yerr=std, linestyle=style, marker="o", ms=3, color=f"C{k}", capsize=2,
                            alpha=1.0 - 0.25 * (2 - j), label=f"{name}, S = {clip:g}")  # fmt: skip
        ax.axhline(clean["retrain"][metric]["mean"], color="k", linewidth=1, label="clean retrain")
        ax.axhline(clean["fedadp dp=false"][metric]["mean"], color="grey", linestyle="-.", label="FedADP dp=false")
        ax.set_xscale("log")
        ax.set_xlabel("privacy budget ε_max (ε_0 = ε_min = ε_max/3)")
        ax.set_title(title)
    axes[1].legend(fontsize=7, loc="upper right")
    meta_line = "5k MNIST, MLP, 20 IID clients, 40 rounds, 1 backdoored target; noise seeds 0-2"
    fig.suptitle(f"FedADP on privatized uploads ({meta_line})", fontsize=9)
    footer = f"{meta['date_utc']} UTC, {meta['machine']['cpu']}, `{meta['command']}`"
    fig.text(0.5, 0.005, footer, ha="center", fontsize=6, color="grey")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    """`python -m bench.baselines_own_terms [--quick] [--section NAME ...]`."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="digits, one seed")
    parser.add_argument(
        "--section", action="append", default=[], choices=list(sections(False)), help="measure only these sections"
    )
    args = parser.parse_args(argv)
    run(quick=args.quick, only=tuple(args.section))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
