"""The report of a Starfish run: ARP, Theorem 1 inputs and the list of revealed values.

ARP (§VI-A): with T_r^j the number of unlearning rounds in which client j was asked to
compute an exact gradient (warm-up, correction or recovery round), ARP = mean_j (T − T_r^j)/T × 100 %, T the
number of stored rounds (what retraining from scratch would cost the client).

Theorem 1 (§V-C, Equation 5): ‖M̂_{t_i} − M_t‖ ≤ 2·sqrt(η_u·[1/μ + 1/(σ(μ − 2))]·
[F(M_0) − F(M*)]·t_i) for t = ⌈t_i/σ⌉, F μ-strongly convex (μ > 2) and L-smooth. Only η_u,
σ and t_i = T′ are public facts of a run; μ and F(M_0) − F(M*) depend on the data, so the
report lists the inputs and `theorem1_bound` evaluates the bound once they are known.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from unlearning.report_sections import revealed_kind
from unlearning.starfish.params import StarfishParams
from unlearning.starfish.run_log import StarfishLog
from unlearning.starfish.state import StarfishState


def average_round_saving(asked: Mapping[str, int], clients: Sequence[str], total_rounds: int) -> float:
    """ARP in percent over `clients` (a client never asked saved every round)."""
    if not clients or total_rounds <= 0:
        return 0.0
    return sum((total_rounds - asked.get(c, 0)) / total_rounds for c in clients) / len(clients) * 100.0


def theorem1_bound(eta_u: float, sigma: float, mu: float, loss_gap: float, t_i: int) -> float:
    """Equation 5: 2·sqrt(η_u·[1/μ + 1/(σ(μ−2))]·[F(M_0) − F(M*)]·t_i); needs μ > 2."""
    if mu <= 2:
        raise ValueError(f"Theorem 1 needs μ > 2, got {mu}")
    if loss_gap < 0 or eta_u <= 0 or not 0 < sigma <= 1 or t_i < 0:
        raise ValueError("Theorem 1 needs η_u > 0, σ ∈ (0, 1], F(M_0) ≥ F(M*) and t_i ≥ 0")
    return 2.0 * math.sqrt(eta_u * (1.0 / mu + 1.0 / (sigma * (mu - 2.0))) * loss_gap * t_i)


def theorem1_inputs(eta_u: float, sigma: float, selected: int, total: int) -> dict[str, Any]:
    """The public inputs of Equation 5 for this run; μ and the loss gap are data-dependent."""
    return {
        "eta_u": eta_u,
        "sigma": sigma,
        "t_i": selected,
        "compared_retrain_round": math.ceil(selected / sigma - 1e-12),
        "stored_rounds": total,
        "mu": None,
        "loss_gap": None,
        "note": "μ (strong convexity) and F(M_0) − F(M*) depend on the data; use theorem1_bound()",
    }


def revealed_section(log: StarfishLog, selected: Sequence[int], inverse: str, sampled: bool) -> dict[str, Any]:
    """Every value the run opened, by kind (docs/ALGORITHM.md "What is revealed";
    `unlearning.report_sections` gives each entry its shape)."""
    flags = sum(len(entry.flags) for entry in log.flags)
    revealed = [e for e in log.releases if e.action == "revealed"]
    return {
        "selected_rounds": revealed_kind(
            len(selected),
            "the top-T′ set of SecRS, opened sorted by round index (never the rank order)",
            values=list(selected),
        ),
        "aggregate_gradients": revealed_kind(
            len(revealed),
            "the update of one unlearning round, or the sum of held ones (moves the public model); "
            "support = fewest clients in any combination with Stage I aggregates (≥ min_cohort)",
            values=[{"steps": e.steps, "support": e.support} for e in revealed],
        ),
        "correction_flags": revealed_kind(flags, "one SecTC flag per remaining client and check round"),
        "curvature_bits": revealed_kind(
            len(log.curvature),
            "one [yᵀs ≥ ε·sᵀs]·[‖y‖² ≤ κ·yᵀs] bit per client and offered L-BFGS pair (safeguard)",
            rejected=sum(1 for c in log.curvature if not c.accepted),
        ),
        "sample_decided_bits": revealed_kind(
            flags if sampled else 0,
            "whether SecTC's public sample already decided a client's flag (check_sample > 0)",
        ),
        "secmi_masked_products": revealed_kind(
            log.inverses if inverse == "secmi" else 0,
            "N = K·R for a random invertible R (Algorithm 7); magnitude leaks over the reals",
        ),
    }


def release_section(log: StarfishLog, min_cohort: int) -> dict[str, Any]:
    """The release rule's decisions (release.py): which steps were excluded, held, merged or dropped.

    `revealed_updates` = 0 means the public model never moved: the unlearned model is M_0."""
    revealed = [e for e in log.releases if e.action == "revealed"]
    dropped = [t for e in log.releases if e.action == "dropped" for t in e.steps]
    return {
        "min_cohort": min_cohort,
        "revealed_updates": len(revealed),
        "excluded_steps": [e.t for e in log.releases if e.action == "excluded"],
        "held_steps": sorted({t for e in revealed if len(e.steps) > 1 for t in e.steps[:-1]} | set(dropped)),
        "merged": [e.steps for e in revealed if len(e.steps) > 1],
        "dropped_steps": dropped,
        "events": [asdict(e) for e in log.releases],
    }


def build_report(
    strategy: str, backend: str, params: StarfishParams, state: StarfishState, total: int, eta_u: float
) -> dict[str, Any]:
    """The JSON report of a finished run over `total` stored rounds (costs are added by the caller)."""
    log = state.log
    answered, missing = log.answered("correction")
    return {
        "strategy": strategy,
        "backend": backend,
        "targets": list(log.request.get("targets", [])),
        "params": params.as_dict,
        "stored_rounds": total,
        "selected_count": len(state.selected),
        "check_interval": params.check_interval(total),
        "selection": {"method": state.method, "selected_rounds": list(state.selected)},
        "rounds": [e.to_json() for e in log.rounds],
        "flags": [asdict(e) for e in log.flags],
        "warmup": {"rounds": sum(1 for e in log.rounds if e.kind == "warmup"), "nondegenerate": state.warmup_pairs},
        "recovery": {
            "rounds": params.recovery_rounds,
            "data_orders": [e.round for e in log.rounds if e.kind == "recovery"],
        },
        "corrections": {"answered": answered, "missing": missing, "events": [asdict(e) for e in log.corrections]},
        "curvature": {"offered": len(log.curvature), "rejected": sum(1 for c in log.curvature if not c.accepted)},
        "asked_rounds": dict(log.asked),
        "answered_rounds": {c: sum(c in e.answered for e in log.corrections) for c in state.clients},
        "arp_percent": average_round_saving(log.asked, state.clients, total),
        "release": release_section(log, params.min_cohort),
        "revealed": revealed_section(log, state.selected, params.inverse, params.check_sample > 0),
        "theorem1": theorem1_inputs(eta_u, params.sigma, len(state.selected), total),
        "resumed_at": list(log.resumed_at),
    }
