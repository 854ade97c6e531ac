"""Resumable state and report of a Crab run (checkpointed after every recovery round).

Everything Crab decides before recovery is public once decided — windows, round scores,
selected rounds, kept clients (one revealed bit each), the rollback point j* — so the
state is public but for the update the release rule may hold secret:

* `public_json()` — those decisions, the recovery rounds done, the run log (asks and
  answers, round entries, release decisions) and the pending release;
* `public_tensors()` — the public model M̃_r;
* `secrets()` — the held update [U] while the release rule keeps one secret (else none).

The report carries Crab's own entries and the sections every job report has
(`selection`, `rounds`, `flags`, `corrections`, `arp_percent`, `release`, `revealed`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from mpc.backend import Secret
from unlearning.starfish.release import PendingRelease
from unlearning.starfish.run_log import StarfishLog
from unlearning.starfish.run_report import average_round_saving, release_section
from unlearning.starfish.state_parts import (
    check_header,
    header,
    held_secret,
    key_secret,
    public_model,
    reading,
    release_json,
    restore_release,
)
from unlearning.strategy import ResumableState

STATE_VERSION = 1
NAME = "crab"


@dataclass
class CrabState(ResumableState):
    """Crab's public decisions and the recovery's progress after recovery round `round`."""

    clients: tuple[str, ...]  #: remaining clients
    score: str  #: how rounds were scored: "kl" (probe outputs) or "step" (public model steps)
    windows: list[list[int]]
    divergences: dict[int, float]  #: D(M_{i−1}, M_i) or its data-free proxy, per stored round
    selected: list[int]  #: the kept rounds t_1 < … < t_{T′}
    kept: list[list[str]]  #: the kept clients of each kept round
    j_star: int  #: the rollback index (0: back to M_0)
    model: torch.Tensor  #: M̃_r (float64, public)
    stored_fraction: float = 0.0
    kept_bits: int = 0  #: kept / not-kept bits revealed by client selection
    round: int = 0  #: r, recovery rounds done
    log: StarfishLog = field(default_factory=StarfishLog)
    pending: PendingRelease = field(default_factory=PendingRelease)
    held: Secret | None = None
    noise_key: Secret | None = None  #: this party's anchored-noise key (starfish/release_gate.py)

    @property
    def rollback_round(self) -> int:
        return self.selected[self.j_star - 1] if self.j_star > 0 else 0

    @property
    def replay(self) -> list[int]:
        """1-based positions j of the kept rounds recovery replays (those after j*)."""
        return list(range(self.j_star + 1, len(self.selected) + 1))

    def snapshot(self) -> CrabState:
        out = copy.copy(self)
        out.model, out.log, out.pending = self.model.clone(), copy.deepcopy(self.log), copy.deepcopy(self.pending)
        return out

    def public_json(self) -> dict[str, Any]:
        return {
            **header(NAME, STATE_VERSION),
            "clients": list(self.clients),
            "score": self.score,
            "windows": [list(w) for w in self.windows],
            "divergences": {str(i): d for i, d in self.divergences.items()},
            "selected": list(self.selected),
            "kept": [list(k) for k in self.kept],
            "j_star": self.j_star,
            "stored_fraction": self.stored_fraction,
            "kept_bits": self.kept_bits,
            "round": self.round,
            **release_json(self.log, self.pending),
        }

    def public_tensors(self) -> dict[str, torch.Tensor]:
        return {"model": self.model.clone()}

    def secrets(self) -> dict[str, Secret]:
        return {**held_secret(self.held), **key_secret(self.noise_key)}

    @classmethod
    def from_parts(
        cls, public: Mapping[str, Any], tensors: Mapping[str, torch.Tensor], secrets: Mapping[str, Secret]
    ) -> CrabState:
        """Rebuild a state from the three parts; raises ValueError if any part is missing."""
        check_header(public, NAME, STATE_VERSION, "Crab")
        with reading("Crab"):
            log, pending, held = restore_release(public, secrets)
            return cls(
                clients=tuple(str(c) for c in public["clients"]),
                score=str(public["score"]),
                windows=[[int(i) for i in w] for w in public["windows"]],
                divergences={int(i): float(d) for i, d in public["divergences"].items()},
                selected=[int(i) for i in public["selected"]],
                kept=[[str(c) for c in k] for k in public["kept"]],
                j_star=int(public["j_star"]),
                model=public_model(tensors),
                stored_fraction=float(public["stored_fraction"]),
                kept_bits=int(public["kept_bits"]),
                round=int(public["round"]),
                log=log,
                pending=pending,
                held=held,
                noise_key=secrets.get("noise_key"),
            )


def revealed_kinds(state: CrabState) -> dict[str, Any]:
    """Every value the run opened, by kind (docs/ALGORITHM.md "Crab under 2PC")."""
    revealed = [e for e in state.log.releases if e.action == "revealed"]
    return {
        "selected_rounds": {
            "count": len(state.selected),
            "values": list(state.selected),
            "why": f"kept rounds, scored by {state.score!r} on public models (windows and scores in the report)",
        },
        "kept_bits": {
            "count": state.kept_bits,
            "why": "one kept / not-kept bit per client of every kept round (SecGE2 against the secret X-th score)",
        },
        "rollback_index": {"count": 1, "value": state.j_star, "why": "j* of eq. (6); the S ≤ Φ bits stay secret"},
        "aggregate_gradients": {
            "count": len(revealed),
            "values": [{"steps": e.steps, "support": e.support} for e in revealed],
            "why": "the calibrated FedAvg update of one recovery round, or the sum of held ones (moves the public "
            "model); support = fewest clients in any combination with Stage I aggregates (≥ min_cohort)",
        },
    }


def build_report(backend: str, params_json: dict[str, Any], state: CrabState, total: int, k: int) -> dict[str, Any]:
    """The JSON report of a finished run over `total` stored rounds (costs are added by the caller)."""
    log = state.log
    missing = [{"round": e.t, "client": c, "reason": e.reason} for e in log.corrections for c in e.missing]
    arp = average_round_saving(log.asked, state.clients, total)
    return {
        "strategy": NAME,
        "backend": backend,
        "targets": list(log.request.get("targets", [])),
        "params": params_json,
        "stored_rounds": total,
        "round_score": state.score,
        "windows": [list(w) for w in state.windows],
        "divergences": {str(i): d for i, d in state.divergences.items()},
        "selected_rounds": list(state.selected),
        "selected_clients": {str(i): sorted(c) for i, c in zip(state.selected, state.kept, strict=True)},
        "rollback_round": state.rollback_round,
        "recovery_rounds": [state.selected[j - 1] for j in state.replay],
        "start_model_round": state.rollback_round,
        "stored_fraction": state.stored_fraction,
        "rounds_used": sum(1 for e in log.rounds if e.kind == "recovery"),
        "client_rounds": {c: log.asked.get(c, 0) for c in state.clients},
        "target_rounds": dict.fromkeys(log.request.get("targets", []), 0),
        "arp": arp,
        "arp_percent": arp,
        "missing_answers": missing,
        "selection": {"method": f"crab ({state.score})", "selected_rounds": list(state.selected)},
        "rounds": [e.to_json() for e in log.rounds],
        "flags": [],
        "corrections": {
            "answered": sum(len(e.answered) for e in log.corrections),
            "missing": len(missing),
            "events": [asdict(e) for e in log.corrections],
        },
        "release": release_section(log, k),
        "revealed": revealed_kinds(state),
        "resumed_at": list(log.resumed_at),
    }
