"""The Starfish report: ARP, Theorem 1 inputs and the list of revealed values.

ARP (§VI-A): with T_r^j the number of unlearning rounds in which client j was asked to
compute an exact gradient (warm-up or correction), ARP = mean_j (T − T_r^j)/T × 100 %, T the
number of stored rounds (what retraining from scratch would cost the client).

Theorem 1 (§V-C, Equation 5): ‖M̂_{t_i} − M_t‖ ≤ 2·sqrt(η_u·[1/μ + 1/(σ(μ − 2))]·
[F(M_0) − F(M*)]·t_i) for t = ⌈t_i/σ⌉, F μ-strongly convex (μ > 2) and L-smooth. Only η_u,
σ and t_i = T′ are public facts of a run; μ and F(M_0) − F(M*) depend on the data, so the
report lists the inputs and `theorem1_bound` evaluates the bound once they are known.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence


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


def revealed_section(log: Mapping[str, Any], ranked: Sequence[int], inverse: str, sampled: bool) -> dict[str, Any]:
    """Every value the run opened, by kind (DESIGN §6 "revealed by design" plus safeguards)."""
    curvature = log.get("curvature", [])
    return {
        "selected_rounds": {"count": len(ranked), "values": list(ranked), "why": "top-T′ payload of SecRS"},
        "aggregate_gradients": {
            "count": sum(1 for entry in log.get("rounds", []) if entry.get("kind") != "skipped"),
            "why": "Ĝ_t per unlearning round (becomes the public model M̂_{t+1})",
        },
        "correction_flags": {
            "count": sum(len(entry["flags"]) for entry in log.get("flags", [])),
            "why": "one SecTC flag per remaining client and check round",
        },
        "curvature_bits": {
            "count": len(curvature),
            "rejected": sum(1 for c in curvature if not c["accepted"]),
            "why": "one [yᵀs ≥ ε·sᵀs]·[‖y‖² ≤ κ·yᵀs] bit per client and offered L-BFGS pair (safeguard)",
        },
        "sample_decided_bits": {
            "count": sum(len(entry["flags"]) for entry in log.get("flags", [])) if sampled else 0,
            "why": "whether SecTC's public sample already decided a client's flag (check_sample > 0)",
        },
        "secmi_masked_products": {
            "count": int(log.get("inverses", 0)) if inverse == "secmi" else 0,
            "why": "N = K·R for a random invertible R (Algorithm 7); magnitude leaks over the reals",
        },
    }
