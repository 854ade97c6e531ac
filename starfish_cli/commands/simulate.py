"""`starfish simulate`: train a simulated federation (plaintext Stage I), unlearn the
backdoored target client(s) with one or several strategies, and write the metrics.

    starfish simulate --strategy starfish --dataset mnist5k --rounds 40 --json out.json
    starfish simulate --compare starfish,retrain,random --out results/ --json out.json

With --compare every strategy runs on the same trained history, and a markdown table and
a PNG figure (TER, BA-ASR, MIA-ASR, ARP per method) are written to --out.
Strategy parameters: --param [STRATEGY:]NAME=VALUE (VALUE is parsed as JSON when it can be).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

DATASETS = ("mnist", "mnist5k", "digits")
BACKENDS = ("plain", "mpc")


def register(subparsers: argparse._SubParsersAction) -> None:
    from evaluation.simulation_config import SimulationConfig

    d = SimulationConfig()
    p = subparsers.add_parser(
        "simulate",
        help="simulate FL with a backdoored client, unlearn it, measure",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    what = p.add_mutually_exclusive_group()
    what.add_argument("--strategy", default="starfish", help="unlearning strategy (default starfish)")
    what.add_argument("--compare", help="comma-separated strategies to run on the same history")
    p.add_argument("--dataset", choices=DATASETS, default=d.dataset)
    p.add_argument(
        "--architecture",
        default="",
        help="model (default: the dataset's; mnist_cnn, fmnist_cnn, cifar_cnn, digits_mlp)",
    )
    p.add_argument("--clients", type=int, default=d.num_clients)
    p.add_argument("--rounds", type=int, default=d.rounds)
    p.add_argument("--targets", type=int, default=d.num_targets, help="number of backdoored target clients")
    p.add_argument(
        "--lr",
        type=float,
        default=d.lr,
        help=f"local learning rate η_l (default {d.lr}; the paper's 0.005 learns too slowly)",
    )
    p.add_argument("--local-epochs", type=int, default=d.local_epochs)
    p.add_argument("--batch-size", type=int, default=d.batch_size)
    p.add_argument("--partition", choices=("iid", "dirichlet"), default=d.partition)
    p.add_argument("--dirichlet-beta", type=float, default=d.dirichlet_beta)
    p.add_argument(
        "--alpha", type=float, default=d.tolerance_rate, help="tolerance rate α of the clients' thresholds δ"
    )
    p.add_argument(
        "--backdoor-copies",
        type=int,
        default=d.backdoor_copies,
        help="triggered copies of the targets' data (0: no backdoor)",
    )
    p.add_argument("--target-label", type=int, default=d.target_label)
    p.add_argument("--max-train-samples", type=int, default=d.max_train_samples, help="> 0: train on a random subset")
    p.add_argument("--seed", type=int, default=d.seed)
    _register_upload_dp(p, d)
    p.add_argument("--backend", choices=BACKENDS, default="plain")
    p.add_argument(
        "--param", action="append", default=[], metavar="[STRATEGY:]NAME=VALUE", help="strategy parameter (repeatable)"
    )
    p.add_argument(
        "--eval-every", type=int, default=0, help="evaluate M_i every N rounds for the training curve (default T/10)"
    )
    p.add_argument("--no-gap", action="store_true", help="skip the retrain reference (saves one full training)")
    p.add_argument("--save-history", type=Path, help="write the trained history (.npz)")
    p.add_argument("--load-history", type=Path, help="reuse a history written by --save-history (its settings win)")
    p.add_argument("--json", type=Path, help="write every measurement to this JSON file")
    p.add_argument("--out", type=Path, help="directory for the comparison table and figure (with --compare)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1: fastest on a busy 2-core machine)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=run)


def _register_upload_dp(p: argparse.ArgumentParser, d) -> None:
    """Options of the clients' upload privacy (evaluation.upload_dp), defaults from `d`."""
    dp = p.add_argument_group("upload privacy (FedADP's adaptive Gaussian mechanism, applied by every client)")
    dp.add_argument("--upload-dp", action="store_true", help="clients clip and noise every upload")
    dp.add_argument("--dp-clip-norm", type=float, default=d.dp_clip_norm, help="clip norm S")
    dp.add_argument("--dp-delta", type=float, default=d.dp_delta, help="δ")
    dp.add_argument("--dp-epsilon-0", type=float, default=d.dp_epsilon_0, help="budget of round 1, ε_0")
    dp.add_argument("--dp-epsilon-min", type=float, default=d.dp_epsilon_min, help="ε_min")
    dp.add_argument("--dp-epsilon-max", type=float, default=d.dp_epsilon_max, help="ε_max (the privacy budget)")
    dp.add_argument("--dp-noise-seed", type=int, default=d.dp_noise_seed, help="seed of the clients' noise")


def _parse_params(items: list[str], strategies: list[str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {s: {} for s in strategies}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--param {item!r}: expected [STRATEGY:]NAME=VALUE")
        owner, colon, name = key.rpartition(":")
        if not colon:
            if len(strategies) != 1:
                raise ValueError(
                    f"--param {item!r}: with --compare, prefix the name with a strategy (e.g. starfish:{key})"
                )
            owner, name = strategies[0], key
        if owner not in out:
            raise ValueError(f"--param {item!r}: strategy {owner!r} is not being run")
        try:
            value: Any = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        out[owner][name] = value
    return out


def _bar(enabled: bool, total: int, desc: str):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, disable=not enabled, unit="round", file=sys.stderr, leave=True)


def run(args: argparse.Namespace) -> int:
    from evaluation.training import torch_threads

    try:
        with torch_threads(args.threads):
            return _run(args)
    except (ValueError, KeyError, FileNotFoundError) as exc:
        print(f"starfish simulate: error: {exc}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace) -> int:
    from evaluation.experiment import Experiment
    from unlearning.registry import strategy_class

    strategies = [s.strip() for s in args.compare.split(",") if s.strip()] if args.compare else [args.strategy]
    if not strategies or len(set(strategies)) != len(strategies):
        raise ValueError("give each strategy once")
    for name in strategies:
        strategy_class(name)  # unknown names fail before any training
    params = _parse_params(args.param, strategies)
    result = _history(args)
    cfg = result.config
    exp = Experiment(result)
    every = args.eval_every if args.eval_every > 0 else max(1, cfg.rounds // 10)
    rounds = sorted(set(range(every, cfg.rounds + 1, every)) | {cfg.rounds})
    doc: dict[str, Any] = {"config": asdict(cfg), "training": exp.training_summary(rounds)}
    warning = did_not_learn(doc["training"]["final"]["ter"], exp.evaluator.num_classes, cfg)
    if warning:
        doc["warning"] = warning
        print(f"starfish simulate: warning: {warning}", file=sys.stderr)
    if not args.no_gap:
        with _bar(not args.no_progress, cfg.rounds, "retrain reference") as bar:
            ref = result.retrain_models(lambda i, total: bar.update(1))[-1]
        doc["retrain_reference"] = exp.evaluator.evaluate(ref)
    from mpc.plain_backend import PlainBackend

    plain = PlainBackend()  # one backend: the shared history is built once for every strategy
    doc["runs"] = [_unlearn(args, exp, name, params[name], plain) for name in strategies]
    _write_outputs(args, doc)
    return 0


def did_not_learn(ter: float, num_classes: int, cfg) -> str | None:
    """A warning when M_T's test error is within 10 points of guessing (1 − 1/classes):
    unlearning measured on a model that learned nothing says nothing."""
    chance = 1.0 - 1.0 / num_classes
    if ter < chance - 0.10:
        return None
    return (
        f"the trained model's test error is {100 * ter:.1f} % against {100 * chance:.1f} % for guessing: "
        f"the history did not learn, so its unlearning figures mean little. Train longer or faster, e.g. "
        f"--rounds {max(20, 2 * cfg.rounds)} --lr {2 * cfg.lr:g}"
        + (f" --max-train-samples {4 * cfg.max_train_samples}" if cfg.max_train_samples > 0 else "")
    )


def _history(args: argparse.Namespace):
    """The Stage I history: loaded (--load-history) or simulated from the options."""
    from evaluation.simulator import SimulationConfig, SimulationResult, simulate

    if args.load_history is not None:
        return SimulationResult.load(args.load_history)
    cfg = SimulationConfig(
        dataset=args.dataset,
        architecture=args.architecture,
        num_clients=args.clients,
        rounds=args.rounds,
        lr=args.lr,
        local_epochs=args.local_epochs,
        batch_size=args.batch_size,
        partition=args.partition,
        dirichlet_beta=args.dirichlet_beta,
        tolerance_rate=args.alpha,
        num_targets=args.targets,
        backdoor_copies=args.backdoor_copies,
        target_label=args.target_label,
        max_train_samples=args.max_train_samples,
        seed=args.seed,
        upload_dp=args.upload_dp,
        dp_clip_norm=args.dp_clip_norm,
        dp_delta=args.dp_delta,
        dp_epsilon_0=args.dp_epsilon_0,
        dp_epsilon_min=args.dp_epsilon_min,
        dp_epsilon_max=args.dp_epsilon_max,
        dp_noise_seed=args.dp_noise_seed,
    ).resolved()
    if cfg.num_targets < 1:
        raise ValueError("unlearning needs at least one target client (--targets ≥ 1)")
    with _bar(not args.no_progress, cfg.rounds, "federated training") as bar:
        result = simulate(cfg, lambda i, total: bar.update(1))
    if args.save_history is not None:
        result.save(args.save_history)
    return result


def _unlearn(args: argparse.Namespace, exp, name: str, params: dict[str, Any], plain) -> dict[str, Any]:
    """Run strategy `name` (on `plain` in this process, or on the two-party cluster) and measure it."""
    bar = _bar(not args.no_progress, 0, name)

    def progress(ev) -> None:
        bar.total = max(bar.total or 0, ev.total_rounds)
        bar.n = ev.unlearning_round
        bar.set_postfix_str(ev.step, refresh=True)

    try:
        if args.backend == "mpc":
            from evaluation.mpc_run import run_mpc

            bar.set_postfix_str("two-party run (dealer + 2 parties)", refresh=True)
            outcome = run_mpc(exp.result, name, params, threads=args.threads)
            return exp.measure(outcome, with_gap=not args.no_gap)
        return exp.run(name, plain, params, progress, with_gap=not args.no_gap)
    finally:
        bar.close()


def _write_outputs(args: argparse.Namespace, doc: dict[str, Any]) -> None:
    """Print the comparison table; write compare.md/.png (--compare) and the JSON (--json)."""
    from evaluation.compare import markdown_table, plot
    from evaluation.experiment import json_ready

    cfg = doc["config"]
    table = markdown_table(doc["runs"], doc["training"]["final"])
    doc["table"] = table
    print(table)
    if args.compare:
        out = args.out or Path(".")
        out.mkdir(parents=True, exist_ok=True)
        (out / "compare.md").write_text(table, encoding="utf-8")
        title = f"{cfg['dataset']}, {cfg['num_clients']} clients, {cfg['rounds']} rounds, seed {cfg['seed']}"
        plot(doc["runs"], out / "compare.png", title)
        print(f"wrote {out / 'compare.md'} and {out / 'compare.png'}")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(json_ready(doc), indent=2, allow_nan=False), encoding="utf-8")
        print(f"wrote {args.json}")
