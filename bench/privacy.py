"""Utility cost of the optional distributed DP: TER and BA-ASR against ε on MNIST.

Setting (small enough for minutes on two cores): MNIST 5k, 10 IID clients, the
`mnist_mlp` (50,890 parameters), 20 FedAvg rounds, client-00 the backdoored target;
Starfish unlearns it with its default parameters on the plaintext backend (the secure
backend opens the same values; tests/unlearning/test_distributed_dp.py). For each noise
multiplier z (and DP off), with clipping norm C and δ = 1e-5:

* Stage I: clients clip uploads to C, the aggregate of every round carries distributed
  Gaussian noise σ = z·C·max_j w_j from each party (`evaluation.aggregate_dp`);
* Stage II: every revealed aggregate is clipped in 2PC and noised the same way
  (`privacy.distributed.PrivateAggregator`);
* ε: Opacus's RDP accountant over each client's Stage I + Stage II releases
  (`privacy.accountant`); the job's ε is the worst client's.

Reports TER and BA-ASR of the trained model M_T and of the unlearned model (mean, min and
max over `STAGE2_REPEATS` Stage II runs with fresh noise on the same history), the job ε,
and the seconds of each phase. Then the cost of one Stage II release under real 2PC
(dealer + two party processes, `mpc.cluster.TwoPartyCluster`): the plain FedAvg reveal
against SecClip + the noised reveal, for the 9 remaining clients × 50,890 coordinates —
wall seconds, online bytes and rounds (party 0's communicator) and offline bytes (dealer).
Writes bench/results/privacy.json and docs/figures/privacy_epsilon.png.

    .venv/bin/python -m bench.privacy            # C = 5, z ∈ {off, 0.5, 1, 2, 4, 8}
    .venv/bin/python -m bench.privacy --quick    # z ∈ {off, 1, 4}
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from bench.env import stamp, write_result

CLIP = 5.0  #: ≈ the median upload norm of this setting (3.8–8.5 between the 10th and 90th percentile)
DELTA = 1e-5
MULTIPLIERS = (0.5, 1.0, 2.0, 4.0, 8.0)
QUICK_MULTIPLIERS = (1.0, 4.0)
STAGE2_REPEATS = 3
"""Stage II runs per z on the same Stage I history, each with fresh CSPRNG noise (the table shows the mean)."""
FIGURE = Path(__file__).resolve().parent.parent / "docs" / "figures" / "privacy_epsilon.png"


def config(seed: int) -> Any:
    from evaluation.simulator import SimulationConfig

    return SimulationConfig(dataset="mnist5k", architecture="mnist_mlp", num_clients=10, rounds=20, seed=seed)


def one_setting(seed: int, multiplier: float | None) -> dict[str, Any]:
    """Stage I + Stage II at noise multiplier z (None: DP off, clipping off); metrics and ε."""
    from evaluation.aggregate_dp import simulate_private
    from evaluation.experiment import Experiment
    from mpc.plain_backend import PlainBackend
    from privacy.accountant import privacy_report
    from privacy.distributed import PrivateAggregator
    from privacy.settings import DPSettings

    on = multiplier is not None
    settings = DPSettings(clip=CLIP if on else 1e12, noise_multiplier=multiplier or 0.0, delta=DELTA)
    start = time.perf_counter()
    result, stage1 = simulate_private(config(seed), settings)
    train_seconds = time.perf_counter() - start
    exp = Experiment(result, result.models[-1])
    trained = exp.evaluator.evaluate(result.models[-1])
    runs, aggregator = [], None
    for _ in range(STAGE2_REPEATS if on else 1):  # fresh Stage II noise each time
        aggregator = PrivateAggregator(settings) if on else None
        runs.append(exp.run("starfish", PlainBackend(), with_gap=False, privacy=aggregator))
    row: dict[str, Any] = {
        "dp": on,
        "noise_multiplier": multiplier,
        "clip": CLIP if on else None,
        "delta": DELTA,
        "trained": {"ter": trained["ter"], "ba_asr": trained["ba_asr"]},
        "unlearned": {key: _spread([r["metrics"][key] for r in runs]) for key in ("ter", "ba_asr")},
        "stage2_runs": len(runs),
        "stage2_releases": 0 if aggregator is None else len(aggregator.releases),
        "seconds": {"stage1": train_seconds, "stage2": sum(r["seconds"] for r in runs) / len(runs)},
    }
    if aggregator is not None:
        report = privacy_report([*stage1, *aggregator.releases], DELTA)
        row["epsilon"] = report["epsilon"]
        row["epsilon_stage1_only"] = privacy_report(stage1, DELTA)["epsilon"]
        row["epsilon_per_client"] = report["per_client"]
    else:
        row["epsilon"] = None  # no guarantee
    return row


def _spread(values: list[float]) -> dict[str, float]:
    """Mean, min and max over the Stage II runs ("value" = the mean, what the table and plot show)."""
    return {"value": sum(values) / len(values), "min": min(values), "max": max(values)}


def measure_release(backend: Any, rank: int, n: int, m: int, dp: bool) -> dict[str, Any]:
    """Party side: share n gradients (party 0), then time one revealed aggregate, with or without DP."""
    import torch

    from privacy.distributed import PrivateAggregator
    from privacy.settings import DPSettings
    from unlearning.fedavg import reveal_aggregate

    gen = torch.Generator().manual_seed(n * m)  # public benchmark inputs
    values = torch.randn(n, m, generator=gen, dtype=torch.float64) * 0.05  # norms ≈ 11 at m = 50,890: clipped
    grads = backend.share(values, src=0)
    privacy = PrivateAggregator(DPSettings(clip=CLIP, noise_multiplier=1.0, delta=DELTA)) if dp else None
    members = [f"c{j}" for j in range(n)]
    name = "dp_release" if dp else "plain_release"
    with backend.step(name):
        reveal_aggregate(backend, grads, [1.0 / n] * n, privacy, members, name)
    return backend.ledger.to_dict()[name]


def release_costs(quick: bool) -> list[dict[str, Any]]:
    """Plain vs DP release under 2PC (module docstring); party 0's counters."""
    from mpc.cluster import ClusterConfig, TwoPartyCluster

    n, m = 9, (5_089 if quick else 50_890)
    rows = []
    with TwoPartyCluster(timeout=1800.0, config=ClusterConfig(session_timeout_s=600.0)) as cluster:
        for dp in (False, True):
            r0, _ = cluster.run(measure_release, n, m, dp)
            rows.append({"dp": dp, "clients": n, "coordinates": m, **r0})
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| z | ε (δ = 1e-5) | TER trained | BA-ASR trained "
        "| TER unlearned, mean (min–max) | BA-ASR unlearned, mean (min–max) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        z = "off" if not r["dp"] else f"{r['noise_multiplier']:g}"
        eps = "∞ (no DP)" if not r["dp"] else f"{r['epsilon']:.2f}"
        t, u = r["trained"], r["unlearned"]
        lines.append(
            f"| {z} | {eps} | {100 * t['ter']:.1f} % | {100 * t['ba_asr']:.1f} % "
            f"| {_cell(u['ter'])} | {_cell(u['ba_asr'])} |"
        )
    return "\n".join(lines)


def _cell(spread: dict[str, float]) -> str:
    if spread["min"] == spread["max"]:
        return f"{100 * spread['value']:.1f} %"
    return f"{100 * spread['value']:.1f} % ({100 * spread['min']:.1f}–{100 * spread['max']:.1f})"


def plot(rows: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    private = [r for r in rows if r["dp"]]
    eps = [r["epsilon"] for r in private]
    off = next(r for r in rows if not r["dp"])
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for key, label, colour in (("ter", "TER", "tab:blue"), ("ba_asr", "BA-ASR", "tab:red")):
        ax.plot(
            eps, [100 * r["unlearned"][key]["value"] for r in private], "o-", color=colour, label=f"{label}, unlearned"
        )
        ax.axhline(100 * off["unlearned"][key]["value"], color=colour, ls="--", lw=1, label=f"{label}, DP off")
    ax.set_xscale("log")
    ax.set_xlabel("job ε (Stage I + Stage II, δ = 1e-5, RDP)")
    ax.set_ylabel("%")
    ax.set_title("MNIST 5k, mnist_mlp, 10 clients, 20 rounds, Starfish")
    ax.legend(fontsize=7)
    fig.tight_layout()
    FIGURE.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(FIGURE, dpi=110)
    plt.close(fig)


def run(quick: bool = False, seed: int = 0) -> dict[str, Any]:
    """`python -m bench privacy`: every setting, the table, the plot; writes privacy.json."""
    import torch

    torch.set_num_threads(1)
    multipliers = QUICK_MULTIPLIERS if quick else MULTIPLIERS
    meta = stamp({"clip": CLIP, "delta": DELTA, "multipliers": list(multipliers), "seed": seed, "quick": quick})
    rows = []
    for z in (None, *multipliers):
        print(f"   z = {'off' if z is None else z}", flush=True)
        rows.append(one_setting(seed, z))
        print(f"      {rows[-1]['unlearned']} ε = {rows[-1]['epsilon']}", flush=True)
    figures = {"setting": {"config": config(seed).__dict__}, "rows": rows, "table": table(rows)}
    write_result("privacy", meta, figures)
    print("   one Stage II release under 2PC, plain vs DP", flush=True)
    figures["release_2pc"] = release_costs(quick)
    for r in figures["release_2pc"]:
        print(
            f"      dp={r['dp']}: {r['seconds']:.2f} s, online {r['online_bytes']} B in {r['online_rounds']} rounds, "
            f"offline {r['offline_bytes']} B",
            flush=True,
        )
    write_result("privacy", meta, figures)
    plot(rows)
    print(figures["table"], flush=True)
    return figures


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    run(args.quick, args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
