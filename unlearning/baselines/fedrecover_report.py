"""The report of a FedRecover run, built from its resumable state (docs/JOBS.md §8).

Besides FedRecover's own entries (schedule, round kinds, abnormal clients, curvature
counts) it carries the sections every job report has, in the same form as Starfish's
(`unlearning.starfish.run_report`): `selection` (the replayed rounds: all stored rounds),
`rounds`, `flags` (the abnormality flags), `corrections` (every ask and its answers),
`arp_percent`, `release` (the release rule's decisions) and `revealed` (every value the run
opened, by kind).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from unlearning.baselines.fedrecover_state import FedRecoverState
from unlearning.starfish.run_report import average_round_saving, release_section

if TYPE_CHECKING:  # the parameters' module imports this one
    from unlearning.baselines.fedrecover import FedRecoverParams

NAME = "fedrecover"


def revealed_kinds(state: FedRecoverState, inverse: str) -> dict[str, Any]:
    """Every value the run opened, by kind (docs/ALGORITHM.md "FedRecover under 2PC")."""
    log = state.log
    revealed = [e for e in log.releases if e.action == "revealed"]
    return {
        "aggregate_gradients": {
            "count": len(revealed),
            "values": [{"steps": e.steps, "support": e.support} for e in revealed],
            "why": "the FedAvg update of one replayed round, or the sum of held ones (moves the public model); "
            "support = fewest clients in any combination with Stage I aggregates (≥ min_cohort)",
        },
        "correction_flags": {
            "count": sum(len(e.flags) for e in log.flags),
            "why": "one abnormality flag per remaining client and estimated round (some |ĝ(k)| > [τ]; "
            "a flagged client computes its exact gradient)",
        },
        "curvature_bits": {
            "count": len(log.curvature),
            "rejected": sum(1 for c in log.curvature if not c.accepted),
            "why": "one [yᵀs ≥ ε·sᵀs]·[‖y‖² ≤ κ·yᵀs] bit per client and offered L-BFGS pair (safeguard)",
        },
        "secmi_masked_products": {
            "count": log.inverses if inverse == "secmi" else 0,
            "why": "N = K·R for a random invertible R (Algorithm 7); magnitude leaks over the reals",
        },
    }


def _asked_rounds(state: FedRecoverState) -> dict[str, int]:
    """T_r^j of every remaining client (rounds it was asked in; 0 when never asked)."""
    return {c: state.log.asked.get(c, 0) for c in state.clients}


def build_report(
    backend: str, params: FedRecoverParams, state: FedRecoverState, total: int, schedule: tuple[int, int, int]
) -> dict[str, Any]:
    """The JSON report of a finished run over `total` stored rounds (costs are added by the caller)."""
    log = state.log
    answered = sum(len(e.answered) for e in log.corrections)
    missing = [{"round": e.t, "client": c, "reason": e.reason} for e in log.corrections for c in e.missing]
    warmup, interval, final = schedule
    arp = average_round_saving(log.asked, state.clients, total)
    replayed = [e.round for e in log.rounds if e.kind != "skipped"]
    return {
        "strategy": NAME,
        "backend": backend,
        "targets": list(log.request.get("targets", [])),
        "params": params.as_dict,
        "stored_rounds": total,
        "rounds_used": len(replayed),
        "schedule": {"warmup": warmup, "correction_interval": interval, "final_tuning": final},
        "round_kinds": {str(e.t): e.kind for e in log.rounds if e.kind != "skipped"},
        "abnormal": {str(e.t): [c for c, f in e.flags.items() if f] for e in log.flags if any(e.flags.values())},
        "curvature": {"offered": len(log.curvature), "rejected": sum(1 for c in log.curvature if not c.accepted)},
        "client_rounds": _asked_rounds(state),
        "target_rounds": dict.fromkeys(log.request.get("targets", []), 0),
        "arp": arp,
        "arp_percent": arp,
        "missing_answers": missing,
        "start_model_round": 0,
        "selection": {"method": "every stored round (FedRecover replay)", "selected_rounds": replayed},
        "rounds": [e.to_json() for e in log.rounds],
        "flags": [asdict(e) for e in log.flags],
        "corrections": {"answered": answered, "missing": len(missing), "events": [asdict(e) for e in log.corrections]},
        "release": release_section(log, params.min_cohort),
        "revealed": revealed_kinds(state, params.inverse),
        "resumed_at": list(log.resumed_at),
    }
