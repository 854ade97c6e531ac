"""From measured grid points (bench/scaling.py) to a cost model: per-step least-squares fits to
each step's natural term, and the whole-job composite of Starfish's default schedule.

Natural terms (one target, n − 1 remaining clients, model size m, T stored rounds):

* TD ∝ (n − 1)·T — SecMax over T rounds per remaining client;
* RS ∝ T·log²T — the bitonic network sorts T rows (Batcher: T·log T·(log T + 1)/4 comparators;
  one target, so n does not enter). The committed grid was measured with that network at
  σ = 1 (all T rounds sorted); the benchmark now chooses ⌈0.6·T⌉ (`scaling.RS_SIGMA`), and SecRS
  now ranks up to 128 rounds by all T(T − 1)/2 pairwise comparisons in a constant number of
  rounds (`mpc/protocols/sectop.py`), whose bytes grow as T², so the RS fit describes the
  network until the grid is measured again;
* UE-first, UE, TC ∝ (n − 1)·m — every coordinate of every remaining client's estimate;
* TC-sample ∝ (n − 1)·min(m, 4,096) — the sample-first pass.

Each fit is y = a·x + b by least squares, with R² = 1 − SS_res/SS_tot. The peak RSS of a party
process is fitted to (n − 1)·m too (`rss_fit`): the benchmark uses it to skip a point whose two
parties would not fit in this machine's available memory, and a deployment to size its hosts.

Whole-job composite (`schedule`; Algorithm 4 as `unlearning.starfish.driver` runs it under
`StarfishParams()`: σ 1, B 2, β 0.3, one recovery round): T′ = ⌈σT⌉ = T replayed rounds;
round t = 1 replays stored round 1 at M̂ = M_0, so it is degenerate (stored uploads, no 2PC
step); rounds 2..B+1 are warm-up (exact answers); rounds B+2..T run SecUE — T − B − 1
estimated rounds — of which those with t ≡ 0 (mod T_c), T_c = ⌈βT⌉, also run SecTC (⌊T/T_c⌋
when T_c ≥ B + 2, e.g. 3 at T = 20). The composite is
TD + RS + UE-first + (T − B − 2)·UE + checks·TC, per wall s and bytes. Not in it: the warm-up
rounds' pair additions, the recovery round's FedAvg reveal, corrections of flagged clients and
the compact-form rebuild after them (they depend on the flags), and the clients' own compute.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from bench.unlearning_cost import SAMPLE_SIZE

TERMS: dict[str, tuple[str, Callable[[dict[str, Any]], float]]] = {
    "TD": ("(n−1)·T", lambda p: (p["n"] - 1) * p["T"]),
    "RS": ("T·log₂²T", lambda p: p["T"] * math.log2(p["T"]) ** 2),
    "UE-first": ("(n−1)·m", lambda p: (p["n"] - 1) * p["m"]),
    "UE": ("(n−1)·m", lambda p: (p["n"] - 1) * p["m"]),
    "TC": ("(n−1)·m", lambda p: (p["n"] - 1) * p["m"]),
    "TC-sample": ("(n−1)·min(m, 4096)", lambda p: (p["n"] - 1) * min(p["m"], SAMPLE_SIZE)),
}


def linear_fit(xs: Sequence[float], ys: Sequence[float]) -> dict[str, float] | None:
    """Least squares y = a·x + b and its R² (None with fewer than two distinct x)."""
    if len(set(xs)) < 2:
        return None
    k = len(xs)
    mx, my = sum(xs) / k, sum(ys) / k
    sxx = sum((x - mx) ** 2 for x in xs)
    a = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    b = my - a * mx
    ss_tot = sum((y - my) ** 2 for y in ys)
    ss_res = sum((y - a * x - b) ** 2 for x, y in zip(xs, ys, strict=True))
    return {"slope": a, "intercept": b, "r2": 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0, "points": k}


def total_bytes(cost: dict[str, float]) -> float:
    """Offline + online bytes of one step (party 0's view)."""
    return cost["offline_bytes"] + cost["online_bytes"]


def fits(points: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per step: its term and the fits of 2PC wall s, 2PC bytes and plaintext wall s against it."""
    out: dict[str, dict[str, Any]] = {}
    for step, (label, term) in TERMS.items():
        have = [p for p in points if step in p["steps"]]
        xs = [float(term(p)) for p in have]
        out[step] = {
            "term": label,
            "wall_s": linear_fit(xs, [p["steps"][step]["wall_s"] for p in have]),
            "bytes": linear_fit(xs, [total_bytes(p["steps"][step]) for p in have]),
            "plain_wall_s": linear_fit(xs, [p["plain_wall_s"][step] for p in have]),
        }
    return out


def rss_fit(points: Sequence[dict[str, Any]]) -> dict[str, float] | None:
    """Peak RSS of the larger party process against (n − 1)·m over the points that ran UE and TC."""
    have = [p for p in points if "UE" in p["steps"]]
    return linear_fit(
        [float((p["n"] - 1) * p["m"]) for p in have], [float(max(p["peak_rss_bytes"].values())) for p in have]
    )


def predicted_rss(points: Sequence[dict[str, Any]], point: dict[str, Any]) -> float | None:
    """The peak RSS per party process `rss_fit` predicts at a point (None without a fit)."""
    fit = rss_fit(points)
    if fit is None:
        return None
    return fit["slope"] * (point["n"] - 1) * point["m"] + fit["intercept"]


def schedule(total_rounds: int) -> dict[str, Any]:
    """The step counts of a job on T stored rounds under `StarfishParams()` (module docstring)."""
    from unlearning.starfish.params import StarfishParams

    params = StarfishParams()
    replayed, b = params.selected_count(total_rounds), params.buffer_size
    interval = params.check_interval(total_rounds)
    estimated = max(0, replayed - b - 1)
    return {
        "replayed": replayed,
        "degenerate": 1,
        "warmup": min(b, replayed - 1),
        "estimated": estimated,
        "checks": sum(1 for t in range(b + 2, replayed + 1) if t % interval == 0),
        "check_interval": interval,
        "recovery": params.recovery_rounds,
        "comparison": params.comparison(total_rounds),
    }


def composite(points: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The whole-job composite at every point; a T-axis point (TD and RS only) takes UE and TC from
    the measured point with the same m and n."""
    out = []
    for p in points:
        source = (
            p if "UE" in p["steps"] else next((q for q in points if _same_model(p, q) and "UE" in q["steps"]), None)
        )
        if source is None:
            continue
        sched = schedule(p["T"])
        counts = {"TD": 1, "RS": 1, "UE-first": 1 if sched["estimated"] else 0}
        counts |= {"UE": max(0, sched["estimated"] - 1), "TC": sched["checks"]}
        steps = {s: p["steps"][s] if s in ("TD", "RS") else source["steps"][s] for s in counts}
        plain = {s: p["plain_wall_s"][s] if s in ("TD", "RS") else source["plain_wall_s"][s] for s in counts}
        out.append(
            {
                "m": p["m"],
                "n": p["n"],
                "T": p["T"],
                "schedule": sched,
                "counts": counts,
                "wall_s": sum(k * steps[s]["wall_s"] for s, k in counts.items()),
                "bytes": sum(k * total_bytes(steps[s]) for s, k in counts.items()),
                "plain_wall_s": sum(k * plain[s] for s, k in counts.items()),
            }
        )
    return out


def _same_model(p: dict[str, Any], q: dict[str, Any]) -> bool:
    return p["m"] == q["m"] and p["n"] == q["n"]
