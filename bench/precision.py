"""Precision study: fixed-point fractional bits f against fidelity to the plaintext run.

Two measurements per f (docs/NUMERICS.md):

1. Whole Starfish jobs under 2PC (dealer + two parties) on one trained history, against
   the plaintext run of the same algorithm on the same history: relative model gap
   ‖M̂_2PC − M̂_plain‖/‖M̂_plain‖, same selected rounds, agreement of the correction flags
   and of the revealed curvature bits, TER/BA-ASR of both, and whether the job hit a
   truncation fault (`TruncationFaultError`) or another failure.
2. Products of random shared values (SecMul with CrypTen's local truncation): the fraction
   of outputs hit by a truncation fault (|error| > 2^(62−2f), a quarter of the ±2^(64−2f) a
   fault adds) for operands of magnitude 2^k (flagged when 2k + 2f ≥ 63, where the
   untruncated product itself leaves the ring), against the model
   ≈ |x·y|·2^(2f−64); and the relative error of ‖g‖² for a gradient of coordinates ≈ 10⁻³
   computed as one truncated dot product (what `unlearning.lbfgs.squared_norms` does).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import torch

from bench.env import single_thread, stamp, write_result
from bench.histories import cached_simulation
from bench.whole_job import unlearn
from mpc.backend import Backend
from mpc.cluster import ClusterConfig, TwoPartyCluster, TwoPartyError

NAME = "precision"
BITS_FULL = (12, 13, 14, 16, 18, 20)
BITS_QUICK = (13, 16)
MAGNITUDES = (4, 8, 12, 14)  #: operand magnitude exponents k (|x|, |y| ≤ 2^k)
PRODUCTS = 1 << 20  #: products per magnitude
JOB_PARAMS = {"sigma": 0.6, "alpha": 0.4, "beta": 0.1, "buffer_size": 2, "recovery_rounds": 0}


def history_config(quick: bool) -> Any:
    """A small trained history (8×8 digits, MLP with 2,410 parameters, 20 clients)."""
    from evaluation.simulator import SimulationConfig

    return SimulationConfig(dataset="digits", num_clients=20, rounds=20 if quick else 40, seed=0)


def product_faults(backend: Backend, rank: int, magnitudes: tuple[int, ...], n: int, seed: int) -> dict[str, Any]:
    """Fault rate of SecMul per magnitude and the relative error of a truncated ‖g‖²."""
    gen = torch.Generator().manual_seed(seed)
    out: dict[str, Any] = {"products": {}}
    for k in magnitudes:
        x = (torch.rand(n, generator=gen, dtype=torch.float64) * 2 - 1) * 2.0**k
        y = (torch.rand(n, generator=gen, dtype=torch.float64) * 2 - 1) * 2.0**k
        product = backend.reveal_encoded(backend.mul(backend.share(x, src=0), backend.share(y, src=1)))  # type: ignore[attr-defined]
        f = backend.f  # type: ignore[attr-defined]
        err = (product.to(torch.float64) / 2.0**f - x * y).abs()
        out["products"][str(k)] = {
            # a truncation fault adds ±2^(64−2f); rounding errors stay far below a quarter of it
            "faults": int((err > 2.0 ** (62 - 2 * f)).sum()),
            "overflow": 2 * k + 2 * f >= 63,  # |x̄·ȳ| may exceed the ring: wrong even without a fault
            "max_rounding_error": float(err[err <= 2.0 ** (62 - 2 * f)].max())
            if bool((err <= 2.0 ** (62 - 2 * f)).any())
            else None,
            "n": n,
            "model_rate": float((x * y).abs().mean()) * 2.0 ** (2 * backend.f - 64),  # type: ignore[attr-defined]
        }
    g = torch.randn(582026, generator=gen, dtype=torch.float64) * 1e-3
    sg = backend.share(g, src=0)
    dot = backend.reveal(backend.matmul(backend.reshape(sg, (1, -1)), backend.reshape(sg, (-1, 1))))
    exact = float(torch.dot(g, g))
    # squaring coordinate by coordinate (truncating each square) loses the small squares
    per_coord = float(backend.reveal(backend.sum(backend.square(sg))))
    out["norm2"] = {
        "exact": exact,
        "dot_rel_error": abs(float(dot.reshape(-1)[0]) - exact) / exact,
        "per_coordinate_rel_error": abs(per_coord - exact) / exact,
    }
    return out


def _compare(secure: dict[str, Any], plain: dict[str, Any], evaluator: Any) -> dict[str, Any]:
    from evaluation.unlearning_metrics import model_gap

    ms, mp = torch.from_numpy(secure["model"]), torch.from_numpy(plain["model"])
    flags_s = [f for e in secure["flags"] for f in e["flags"].values()]
    flags_p = [f for e in plain["flags"] for f in e["flags"].values()]
    same = sum(a == b for a, b in zip(flags_s, flags_p, strict=True))
    return {
        "model_gap": model_gap(ms, mp),
        "same_selection": secure["selected"] == plain["selected"],
        "flag_agreement": same / max(len(flags_p), 1) if len(flags_s) == len(flags_p) else 0.0,
        "flags": len(flags_p),
        "curvature_secure": secure["curvature"],
        "curvature_plain": plain["curvature"],
        "metrics_secure": evaluator.evaluate(ms),
        "metrics_plain": evaluator.evaluate(mp),
        "wall_s": secure["wall_s"],
    }


def run(quick: bool = False) -> dict[str, Any]:
    from evaluation.unlearning_metrics import Evaluator
    from mpc.plain_backend import PlainBackend

    bits = BITS_QUICK if quick else BITS_FULL
    config = history_config(quick)
    meta = stamp(
        {
            "bits": list(bits),
            "simulation": asdict(config),
            "starfish": JOB_PARAMS,
            "magnitudes": list(MAGNITUDES),
            "products": PRODUCTS,
            "quick": quick,
        }
    )
    result = cached_simulation(config)
    evaluator = Evaluator(result)  # type: ignore[arg-type]
    with single_thread():
        plain = unlearn(PlainBackend(), 0, asdict(config), JOB_PARAMS, 0)
    figures: dict[str, Any] = {"bits": {}, "plain_metrics": evaluator.evaluate(torch.from_numpy(plain["model"]))}
    for f in bits:
        row: dict[str, Any] = {}
        with TwoPartyCluster(
            timeout=3600.0, config=ClusterConfig(precision_bits=f, session_timeout_s=600.0)
        ) as cluster:
            row["faults"], _ = cluster.run(product_faults, MAGNITUDES, PRODUCTS // (4 if quick else 1), f)
            try:
                secure, _ = cluster.run(unlearn, asdict(config), JOB_PARAMS, 0)
                row["job"] = _compare(secure, plain, evaluator)
                row["job"]["outcome"] = "ok"
            except TwoPartyError as exc:
                text = str(exc)
                row["job"] = {
                    "outcome": "truncation fault" if "TruncationFaultError" in text else "failed",
                    "error": text.strip().splitlines()[-1][:300],
                }
        gap = row["job"].get("model_gap", {}).get("relative")
        print(
            f"   f = {f}: job {row['job']['outcome']}, relative gap {gap}, "
            f"faults {[row['faults']['products'][str(k)]['faults'] for k in MAGNITUDES]}",
            flush=True,
        )
        figures["bits"][str(f)] = row
    write_result(NAME + ("_quick" if quick else ""), meta, figures)
    return figures
