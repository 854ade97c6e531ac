"""Resumable state of a Starfish run (checkpointed after every unlearning round).

It is the `unlearning.strategy.ResumableState` of Starfish: three parts a party can
persist without pickle,

* `public_json()` — JSON-ready facts (round reached, selected rounds, the pending release
  of the release rule, the run log);
* `public_tensors()` — public tensors by name (the model M̂_t, the L-BFGS model differences);
* `secrets()` — backend `Secret`s by name (thresholds [δ^j], L-BFGS gradient differences [y],
  the held update [U] while the release rule keeps one secret).

`StarfishState.from_parts(public_json, public_tensors, secrets)` rebuilds it. Version 2
stores the selected rounds as a set sorted by index (`selected`) and the held update;
version 1 (`ranked`, rank order, no held update) is still read.
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
from unlearning.strategy import ResumableState

STATE_VERSION = 2
#: versions `from_parts` reads
READABLE_VERSIONS = (1, 2)


@dataclass(frozen=True)
class CurvaturePair:
    """One L-BFGS pair of a client: ŝ = s/‖s‖ (public), ŷ = y/‖s‖ (secret), from unlearning round t.

    Scaling a pair by a positive constant leaves the BFGS matrix unchanged (both rank-one
    terms are homogeneous of degree 0 in (s, y)), and unit ‖ŝ‖ keeps the 2B×2B system
    well scaled in fixed point.
    """

    round: int
    s: torch.Tensor
    y: Secret


@dataclass
class StarfishState(ResumableState):
    """Everything needed to continue a run after unlearning round `round`."""

    clients: tuple[str, ...]  #: remaining clients (the order of `deltas`)
    selected: tuple[int, ...]  #: revealed top-T′ rounds, sorted by round index (the replay order)
    method: str  #: round-selection method used
    deltas: Secret  #: [δ^j], shape (len(clients),)
    model: torch.Tensor  #: M̂_t (float64, public)
    round: int = 0  #: t, unlearning rounds completed
    warmup_pairs: int = 0  #: non-degenerate warm-up rounds done so far
    warmup_over: bool = False
    buffers: dict[str, list[CurvaturePair]] = field(default_factory=dict)
    log: StarfishLog = field(default_factory=StarfishLog)
    pending: PendingRelease = field(default_factory=PendingRelease)  #: what the held update holds
    held: Secret | None = None  #: [U], the held update (None when nothing is held)

    def snapshot(self) -> StarfishState:
        """An independent copy (secrets are immutable handles and are shared)."""
        return StarfishState(
            clients=self.clients,
            selected=self.selected,
            method=self.method,
            deltas=self.deltas,
            model=self.model.clone(),
            round=self.round,
            warmup_pairs=self.warmup_pairs,
            warmup_over=self.warmup_over,
            buffers={c: list(pairs) for c, pairs in self.buffers.items()},
            log=copy.deepcopy(self.log),
            pending=copy.deepcopy(self.pending),
            held=self.held,
        )

    # ------------------------------------------------------------------ persistence parts
    def public_json(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "clients": list(self.clients),
            "selected": list(self.selected),
            "method": self.method,
            "round": self.round,
            "warmup_pairs": self.warmup_pairs,
            "warmup_over": self.warmup_over,
            "buffers": {c: [p.round for p in pairs] for c, pairs in self.buffers.items()},
            "log": self.log.to_json(),
            "pending": self.pending.to_json(),
        }

    def public_tensors(self) -> dict[str, torch.Tensor]:
        out = {"model": self.model.clone()}
        for c, pairs in self.buffers.items():
            for k, pair in enumerate(pairs):
                out[f"buffer/{c}/{k}/s"] = pair.s.clone()
        return out

    def secrets(self) -> dict[str, Secret]:
        out: dict[str, Secret] = {"deltas": self.deltas}
        if self.held is not None:
            out["held"] = self.held
        for c, pairs in self.buffers.items():
            for k, pair in enumerate(pairs):
                out[f"buffer/{c}/{k}/y"] = pair.y
        return out

    @classmethod
    def from_parts(
        cls, public: Mapping[str, Any], tensors: Mapping[str, torch.Tensor], secrets: Mapping[str, Secret]
    ) -> StarfishState:
        """Rebuild a state from the three parts; raises ValueError if any part is missing."""
        version = public.get("version")
        if version not in READABLE_VERSIONS:
            raise ValueError(f"unsupported Starfish state version {version!r}")
        try:
            buffers = {
                c: [
                    CurvaturePair(round=int(r), s=tensors[f"buffer/{c}/{k}/s"], y=secrets[f"buffer/{c}/{k}/y"])
                    for k, r in enumerate(rounds)
                ]
                for c, rounds in public["buffers"].items()
            }
            return cls(
                clients=tuple(public["clients"]),
                selected=tuple(sorted(int(r) for r in public["selected" if version == 2 else "ranked"])),
                method=str(public["method"]),
                deltas=secrets["deltas"],
                model=tensors["model"].to(torch.float64).clone(),
                round=int(public["round"]),
                warmup_pairs=int(public["warmup_pairs"]),
                warmup_over=bool(public["warmup_over"]),
                buffers=buffers,
                log=StarfishLog.from_json(public["log"]),
                pending=PendingRelease.from_json(public.get("pending", {})),
                held=_held(public, secrets),
            )
        except KeyError as exc:
            raise ValueError(f"incomplete Starfish state: missing {exc}") from None
        except TypeError as exc:
            raise ValueError(f"malformed Starfish state: {exc}") from None


def _held(public: Mapping[str, Any], secrets: Mapping[str, Secret]) -> Secret | None:
    """The held update, which a state with pending steps must carry."""
    if public.get("pending", {}).get("steps"):
        return secrets["held"]
    return None
