"""Resumable state of a FedRecover run (checkpointed after every replayed round).

The `unlearning.strategy.ResumableState` of FedRecover, in the three parts a party persists
without pickle, laid out like Starfish's (`unlearning.starfish.state`, whose pair helpers
it uses):

* `public_json()` — rounds replayed, the run log (round kinds, abnormality flags, asks and
  answers, curvature bits, release decisions), the pending release, the pairs' rounds;
* `public_tensors()` — the public model M̂_t and the L-BFGS model differences ŝ;
* `secrets()` — the abnormality threshold [τ], the gradient differences [ŷ] and cached
  compact forms, and the held update [U] while the release rule keeps one secret.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from mpc.backend import Secret
from unlearning.starfish.release import PendingRelease
from unlearning.starfish.run_log import StarfishLog
from unlearning.starfish.state import (
    CurvaturePair,
    PairCache,
    pairs_public,
    pairs_secrets,
    pairs_tensors,
    restore_pairs,
)
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
NAME = "fedrecover"


@dataclass
class FedRecoverState(ResumableState):
    """Everything needed to continue a FedRecover replay after stored round `round`."""

    clients: tuple[str, ...]  #: remaining clients
    tau: Secret  #: [τ], shape (1,)
    model: torch.Tensor  #: M̂_t (float64, public)
    round: int = 0  #: t, stored rounds replayed
    buffers: dict[str, list[CurvaturePair]] = field(default_factory=dict)
    forms: dict[str, PairCache] = field(default_factory=dict)
    #: the public record; `rounds[].kind` is the exact-round reason or "estimate"/"skipped"
    log: StarfishLog = field(default_factory=StarfishLog)
    pending: PendingRelease = field(default_factory=PendingRelease)
    held: Secret | None = None  #: [U], the held update (None when nothing is held)
    noise_key: Secret | None = None  #: this party's anchored-noise key (starfish/release_gate.py)

    def snapshot(self) -> FedRecoverState:
        """An independent copy (secrets are immutable handles and are shared)."""
        return FedRecoverState(
            clients=self.clients,
            tau=self.tau,
            model=self.model.clone(),
            round=self.round,
            buffers={c: list(pairs) for c, pairs in self.buffers.items()},
            forms=dict(self.forms),
            log=copy.deepcopy(self.log),
            pending=copy.deepcopy(self.pending),
            held=self.held,
            noise_key=self.noise_key,
        )

    def public_json(self) -> dict[str, Any]:
        return {
            **header(NAME, STATE_VERSION),
            "clients": list(self.clients),
            "round": self.round,
            **pairs_public(self.buffers, self.forms),
            **release_json(self.log, self.pending),
        }

    def public_tensors(self) -> dict[str, torch.Tensor]:
        return {"model": self.model.clone(), **pairs_tensors(self.buffers)}

    def secrets(self) -> dict[str, Secret]:
        pairs = pairs_secrets(self.buffers, self.forms)
        return {"tau": self.tau, **pairs, **held_secret(self.held), **key_secret(self.noise_key)}

    @classmethod
    def from_parts(
        cls, public: Mapping[str, Any], tensors: Mapping[str, torch.Tensor], secrets: Mapping[str, Secret]
    ) -> FedRecoverState:
        """Rebuild a state from the three parts; raises ValueError if any part is missing."""
        check_header(public, NAME, STATE_VERSION, "FedRecover")
        with reading("FedRecover"):
            buffers, forms = restore_pairs(public, tensors, secrets)
            log, pending, held = restore_release(public, secrets)
            return cls(
                clients=tuple(str(c) for c in public["clients"]),
                tau=secrets["tau"],
                model=public_model(tensors),
                round=int(public["round"]),
                buffers=buffers,
                forms=forms,
                log=log,
                pending=pending,
                held=held,
                noise_key=secrets.get("noise_key"),
            )
