"""The table of benchmarks `python -m bench` and `starfish bench` run, cheapest first.

Each entry names a module of this package exposing `run(quick: bool) -> dict`, which writes its
own `bench/results/<name>.json` and returns the figures. A module is imported only when its
benchmark runs, so reading the table loads no torch.
"""

from __future__ import annotations

import importlib
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Benchmark:
    """One row: `name` is the module `bench.<name>`; `what` says what it measures."""

    name: str
    what: str

    def run(self, quick: bool) -> dict:
        """Import `bench.<name>` and run it; its figures."""
        return importlib.import_module(f"bench.{self.name}").run(quick=quick)


TABLE: tuple[Benchmark, ...] = (
    Benchmark("mpc_primitives", "2PC protocols: time, bytes and rounds, offline against online"),
    Benchmark("mpc_plane", "the encrypted MPC plane: the per-step benchmark on three transports"),
    Benchmark("stage1", "one Stage I round over secret shares against a plain FedAvg round"),
    Benchmark("stage1_clip", "one Stage I round under distributed DP: clipping inside 2PC"),
    Benchmark("soak", "Stage I with hundreds of clients while parties and clients are killed"),
    Benchmark("flower_scale", "Flower's Simulation Engine at scale, with and without Starfish"),
    Benchmark("quality_mnist", "unlearning quality on MNIST (Figure 3 setting), plaintext backend"),
    Benchmark("privacy", "utility cost of the distributed DP: TER and BA-ASR against epsilon"),
    Benchmark("starfish_defaults", "Starfish's defaults against retraining: which settings close the TER gap"),
    Benchmark("unlearning_cost", "per-step 2PC cost of one unlearning round (Tables I and VII)"),
    Benchmark("ue_round", "one Stage II update-estimation round at the paper's size under 2PC"),
    Benchmark("scaling", "scaling curves of a job's 2PC cost in model size, clients and stored rounds"),
    Benchmark("switching", "the switching threshold of round selection from measured costs"),
    Benchmark("precision", "fixed-point fractional bits against fidelity to the plaintext run"),
    Benchmark("whole_job", "a whole unlearning job, 2PC beside plaintext (Table II)"),
    Benchmark("whole_job_service", "a whole unlearning job through the real service (Table II)"),
    Benchmark("multihost", "the whole job with the operators on emulated hosts"),
    Benchmark("sweeps", "parameter sweeps of Starfish (Figures 4-6 and 8-12)"),
    Benchmark("quality_compare", "forgetting quality of every method over seeds (Figure 3)"),
    Benchmark("secrs_random", "SecRS's round selection against a uniform random draw"),
    Benchmark("quality_matrix", "forgetting quality per dataset, partition and seed against retraining"),
    Benchmark("baselines_own_terms", "PUF, FedADP and FedEraser measured as their papers measure them"),
    Benchmark("report", "docs/RESULTS.md and docs/figures/ from the JSON under bench/results/"),
)

BY_NAME = {b.name: b for b in TABLE}


class UnknownBenchmark(ValueError):
    """A name that is not in the table; the message lists the names that are."""


def select(names: Sequence[str]) -> list[Benchmark]:
    """The named benchmarks in the order given (every one when none is named)."""
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise UnknownBenchmark(f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(BY_NAME)}")
    return [BY_NAME[n] for n in names] if names else list(TABLE)


def run_all(benchmarks: Sequence[Benchmark], quick: bool) -> int:
    """Run each benchmark, reporting a failure and going on with the others; 1 when any failed."""
    failed = []
    for bench in benchmarks:
        start = time.perf_counter()
        print(f"== bench {bench.name}{' (quick)' if quick else ''}", flush=True)
        try:
            figures = bench.run(quick)
        except Exception as exc:  # report and continue with the other benchmarks
            print(f"   FAILED: {type(exc).__name__}: {exc}", file=sys.stderr)
            failed.append(bench.name)
            continue
        print(
            f"   done in {time.perf_counter() - start:.1f} s; {len(json.dumps(figures))} bytes of figures", flush=True
        )
    return 1 if failed else 0
