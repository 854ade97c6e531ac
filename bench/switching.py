"""The switching threshold T_δ of round selection from measured CrypTen costs (Starfish §IV-A).

SecRS sorts the T stored rounds by u_i/v_i. Method 1 compares pairs with SecGE2
(u_i·v_j ≥ u_j·v_i: two SecMul and one SecGE per comparator, no division); Method 2 first
computes τ_i = SecDiv(u_i, v_i) once per round and compares with SecGE. The paper picks
Method 1 iff T·C_SecDiv ≥ 2·n_comp(T)·C_SecMul with ABY's per-operation costs.

Here, on a dealer and two party processes:

1. per-operation cost (wall time, bytes, rounds) of SecMul, SecGE, SecGE2 and SecDiv for
   batch sizes n = 1 … 65,536, fitted as latency + n·throughput (`fit`);
2. the paper's rule evaluated with our per-element costs (`paper_rule_threshold`);
3. round selection itself (`unlearning.starfish.secrs.select_rounds`) with both methods
   for T = 8 … 256 stored rounds: measured time and bytes, and the measured crossover.

Batching matters: our bitonic network evaluates every comparator of a stage in ONE call, so
a comparison stage costs about one call's latency whatever its width, and SecDiv is one
batched call of ≈ 38 rounds; the per-element rule of the paper ignores this.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import cache
from typing import Any

import torch

from bench.env import stamp, write_result
from bench.histories import SyntheticHistory
from mpc.backend import Backend
from mpc.cluster import ClusterConfig, TwoPartyCluster

NAME = "switching"
BATCHES_FULL = (1, 16, 256, 4096, 65536)
BATCHES_QUICK = (1, 256, 4096)
ROUNDS_FULL = (8, 16, 32, 64, 128, 256)
ROUNDS_QUICK = (8, 32, 64)
OPS = ("mul", "ge", "ge2", "div")
REPEATS = 3
MODEL_LIMIT = 1024  #: largest T the cost models are evaluated for
SELECTION_MODEL_SIZE = 1024  #: m of the synthetic history (the local dot products are negligible)


def op_costs(backend: Backend, rank: int, batches: tuple[int, ...], repeats: int) -> dict[str, Any]:
    """Ledger of each op at each batch size (median of `repeats` is taken by the caller)."""
    gen = torch.Generator().manual_seed(1)
    for n in batches:
        a = backend.share(torch.rand(n, generator=gen, dtype=torch.float64) + 0.5, src=0)
        b = backend.share(torch.rand(n, generator=gen, dtype=torch.float64) + 0.5, src=1)
        for r in range(repeats):
            with backend.step(f"mul/{n}/{r}"):
                backend.mul(a, b)
            with backend.step(f"ge/{n}/{r}"):
                backend.ge(a, b)
            with backend.step(f"ge2/{n}/{r}"):
                backend.ge2(a, b, b, a)
            with backend.step(f"div/{n}/{r}"):
                backend.div(a, b)
    return backend.ledger.to_dict()


def selection_costs(backend: Backend, rank: int, rounds: tuple[int, ...], m: int) -> dict[str, Any]:
    """Ledger of SecRS with each method for each T (one target client)."""
    from unlearning.starfish.secrs import select_rounds

    for T in rounds:
        hist = SyntheticHistory(m, num_clients=2, rounds=T, seed=T)
        for i in range(1, T + 1):  # generate the uploads before the clock starts
            hist.norms(backend, i, [hist.ids[0]])
        for method in ("method1", "method2"):
            with backend.step(f"{method}/{T}"):
                select_rounds(backend, hist, [hist.ids[0]], math.ceil(0.6 * T), method, alt=False)
    return backend.ledger.to_dict()


@cache
def comparator_stages(T: int) -> tuple[int, ...]:
    """Real-row comparators per stage of our bitonic network on T rows (virtual rows are free)."""
    from mpc.protocols.secsrt import bitonic_stages

    n_pad = 1 << max(T - 1, 0).bit_length()
    slot = list(range(T)) + [-1] * (n_pad - T)
    widths = []
    for stage in bitonic_stages(n_pad):
        width = 0
        for hi, lo in stage:
            if slot[hi] >= 0 and slot[lo] >= 0:
                width += 1
            elif slot[hi] < 0 <= slot[lo]:
                slot[hi], slot[lo] = slot[lo], slot[hi]
        if width:
            widths.append(width)
    return tuple(widths)


def fit(points: list[tuple[int, float]]) -> dict[str, float]:
    """Least-squares cost = latency + n·per_element over (n, cost) points."""
    n = torch.tensor([p[0] for p in points], dtype=torch.float64)
    c = torch.tensor([p[1] for p in points], dtype=torch.float64)
    design = torch.stack([torch.ones_like(n), n], dim=1)
    sol = torch.linalg.lstsq(design, c.reshape(-1, 1)).solution.reshape(-1)
    return {"latency": float(sol[0]), "per_element": max(float(sol[1]), 0.0)}


def paper_rule_threshold(per_elem: dict[str, dict[str, float]], key: str, limit: int = MODEL_LIMIT) -> int:
    """Largest T with T·C_SecDiv ≥ 2·n_comp(T)·C_SecMul (the paper's rule, per-element costs)."""
    best = 0
    for T in range(2, limit + 1):
        if T * per_elem["div"][key] >= 2 * sum(comparator_stages(T)) * per_elem["mul"][key]:
            best = T
    return best


def batched_model(fits: dict[str, dict[str, dict[str, float]]], T: int, key: str) -> dict[str, float]:
    """Predicted cost of both methods on our batched network (one call per stage)."""
    stages = comparator_stages(T)

    def call(op: str, n: int) -> float:
        f = fits[op][key]
        return f["latency"] + f["per_element"] * n

    select = sum(call("mul", w) for w in stages)  # SecSel of each stage: one multiplication by the bit
    return {
        "method1": sum(call("ge2", w) for w in stages) + select,
        "method2": call("div", T) + sum(call("ge", w) for w in stages) + select,
    }


def _median(ledger: dict[str, Any], prefix: str, field: str, repeats: int) -> float:
    vals = sorted(float(ledger[f"{prefix}/{r}"][field]) for r in range(repeats))
    return vals[len(vals) // 2]


def run(quick: bool = False) -> dict[str, Any]:
    batches = BATCHES_QUICK if quick else BATCHES_FULL
    rounds = ROUNDS_QUICK if quick else ROUNDS_FULL
    meta = stamp(
        {
            "batches": list(batches),
            "rounds": list(rounds),
            "repeats": REPEATS,
            "m": SELECTION_MODEL_SIZE,
            "quick": quick,
        }
    )
    with TwoPartyCluster(timeout=3600.0, config=ClusterConfig(session_timeout_s=600.0)) as cluster:
        ops, _ = cluster.run(op_costs, batches, REPEATS)
        sel, _ = cluster.run(selection_costs, rounds, SELECTION_MODEL_SIZE)
    per_op, fits = _fit_ops(ops, batches)
    per_elem = {op: {key: fits[op][key]["per_element"] for key in ("seconds", "bytes")} for op in OPS}
    selection = [_selection_row(sel, fits, T) for T in rounds]
    crossing = [r["T"] for r in selection if r["method2"]["seconds"] < r["method1"]["seconds"]]
    crossing_bytes = [r["T"] for r in selection if r["method2"]["bytes"] < r["method1"]["bytes"]]
    model_cross = next(
        (
            T
            for T in range(2, MODEL_LIMIT + 1)
            if (lambda p: p["method2"] < p["method1"])(batched_model(fits, T, "seconds"))
        ),
        None,
    )
    figures = {
        "ops": per_op,
        "fits": fits,
        "selection": selection,
        "threshold": {
            "paper_rule_time": paper_rule_threshold(per_elem, "seconds"),
            "paper_rule_bytes": paper_rule_threshold(per_elem, "bytes"),
            "measured_time_first_T_method2_faster": crossing[0] if crossing else None,
            "measured_bytes_first_T_method2_smaller": crossing_bytes[0] if crossing_bytes else None,
            "batched_model_time_first_T_method2_faster": model_cross,
        },
    }
    for r in selection:
        print(
            f"   T={r['T']:4d}: method1 {r['method1']['seconds']:.2f} s, method2 {r['method2']['seconds']:.2f} s",
            flush=True,
        )
    print(f"   thresholds: {figures['threshold']}", flush=True)
    write_result(NAME + ("_quick" if quick else ""), meta, figures)
    return figures


def _fit_ops(ops: dict[str, Any], batches: Sequence[int]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Per operation: the median cost at each batch size, and its latency + per-element fit."""
    per_op: dict[str, Any] = {}
    fits: dict[str, dict[str, dict[str, float]]] = {}
    for op in OPS:
        rows = []
        for n in batches:
            rows.append(
                {
                    "n": n,
                    "seconds": _median(ops, f"{op}/{n}", "seconds", REPEATS),
                    "bytes": _median(ops, f"{op}/{n}", "online_bytes", REPEATS)
                    + _median(ops, f"{op}/{n}", "offline_bytes", REPEATS),
                    "rounds": _median(ops, f"{op}/{n}", "online_rounds", REPEATS),
                }
            )
        per_op[op] = rows
        fits[op] = {key: fit([(r["n"], r[key]) for r in rows]) for key in ("seconds", "bytes", "rounds")}
    return per_op, fits


def _selection_row(sel: dict[str, Any], fits: dict[str, Any], T: int) -> dict[str, Any]:
    """A whole SecRS at T rounds with both methods, measured and as the batched model predicts."""
    row: dict[str, Any] = {"T": T, "comparators": sum(comparator_stages(T)), "stages": len(comparator_stages(T))}
    for method in ("method1", "method2"):
        c = sel[f"{method}/{T}"]
        row[method] = {
            "seconds": c["seconds"],
            "bytes": c["online_bytes"] + c["offline_bytes"],
            "rounds": c["online_rounds"],
        }
    row["model_seconds"] = batched_model(fits, T, "seconds")
    row["model_bytes"] = batched_model(fits, T, "bytes")
    return row
