"""`starfish bench`: run the benchmarks and write their JSON under bench/results/.

Each benchmark is a module of the `bench` package exposing `run(quick: bool) -> dict`
that writes its own `bench/results/<name>.json` and returns the figures.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time

#: benchmark modules, cheapest first
BENCHMARKS = (
    "mpc_primitives",
    "mpc_plane",
    "stage1",
    "stage1_clip",
    "soak",
    "flower_scale",
    "quality_mnist",
    "privacy",
    "starfish_defaults",
    "unlearning_cost",
    "ue_round",
    "switching",
    "precision",
    "whole_job",
    "whole_job_service",
    "multihost",
    "sweeps",
    "quality_compare",
    "secrs_random",
    "quality_matrix",
    "baselines_own_terms",
    "report",
)


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("bench", help="run the benchmarks (JSON under bench/results/)")
    parser.add_argument("--quick", action="store_true", help="smaller sizes, finishes in minutes")
    parser.add_argument(
        "--only", action="append", default=None, metavar="NAME", help=f"run only these (of {', '.join(BENCHMARKS)})"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    names = args.only or list(BENCHMARKS)
    unknown = sorted(set(names) - set(BENCHMARKS))
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}", file=sys.stderr)
        return 2
    failed = []
    for name in names:
        start = time.perf_counter()
        print(f"== bench {name}{' (quick)' if args.quick else ''}", flush=True)
        try:
            module = importlib.import_module(f"bench.{name}")
            figures = module.run(quick=args.quick)
        except Exception as exc:  # report and continue with the other benchmarks
            print(f"   FAILED: {type(exc).__name__}: {exc}", file=sys.stderr)
            failed.append(name)
            continue
        print(
            f"   done in {time.perf_counter() - start:.1f} s; {len(json.dumps(figures))} bytes of figures", flush=True
        )
    return 1 if failed else 0
