"""Resumable state of a Starfish run (checkpointed after every unlearning round).

It is the `unlearning.strategy.ResumableState` of Starfish: three parts a party can
persist without pickle,

* `public_json()` — JSON-ready facts (round reached, selected rounds, the pending release
  of the release rule, the run log);
* `public_tensors()` — public tensors by name (the model M̂_t, the L-BFGS model differences);
* `secrets()` — backend `Secret`s by name (thresholds [δ^j], this party's anchored-noise key,
  L-BFGS gradient differences [y] as held (ŷ = scale·y),
  the held update [U] while the release rule keeps one secret, the L-BFGS Gram entries and
  each client's cached compact form, so a resumed run reuses the very K⁻¹ of the
  interrupted one).

`StarfishState.from_parts(public_json, public_tensors, secrets)` rebuilds it. Version 4
stores each pair's public scale (`scales`: its [y] may be the raw rows, ŷ = scale·y);
older versions held normalised rows (scale 1). Version 3 stores each round's ŝ once
(`pairs/s/<round>`: every client's pair of a round has the same ŝ, and the pairs share one
tensor); version 2 stored it per pair (`buffer/<client>/<k>/s`) and is still read, as is
version 1 (`ranked`, rank order, no held update; version 2 on stores the selected rounds
as a set sorted by index, `selected`, and the held update).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from mpc.backend import Fixed, Prepared, Secret
from unlearning.starfish.release import PendingRelease
from unlearning.starfish.run_log import StarfishLog
from unlearning.starfish.state_parts import held_secret, public_model, reading, release_json, restore_release
from unlearning.strategy import ResumableState

STATE_VERSION = 4
#: versions `from_parts` reads
READABLE_VERSIONS = (1, 2, 3, 4)


@dataclass(frozen=True)
class CurvaturePair:
    """One L-BFGS pair of a client: ŝ = s/‖s‖ (public), ŷ = y/‖s‖ (secret), from unlearning round t.

    Scaling a pair by a positive constant leaves the BFGS matrix unchanged (both rank-one
    terms are homogeneous of degree 0 in (s, y)), and unit ‖ŝ‖ keeps the 2B×2B system
    well scaled in fixed point. ŷ is held as rows `y` and a public `scale`, ŷ = scale·y:
    the normalised rows and 1 after a step with ‖s‖ ≥ 1, the raw rows and 1/‖s‖ after a
    shorter one (`unlearning.starfish.secue.add_pairs`), applied to the other factor of
    each product (`unlearning.lbfgs`, "held rows").
    """

    round: int
    s: torch.Tensor
    y: Secret  #: the held rows (ŷ = scale·y)
    #: [ŷ_iᵀŷ] for the (up to B−1) pairs before it in the buffer when it entered, oldest
    #: first, then ‖ŷ‖²: the new row of YᵀY (None in a checkpoint that predates it)
    yy: Secret | None = None
    #: ŷ fixed for the products Y·c_y (`Backend.fix`; not persisted: valid in one session,
    #: fixed again when missing or stale, `unlearning.starfish.secue.current_fixed`)
    fixed: Fixed | None = field(default=None, compare=False)
    #: the public factor of the held rows: 1/‖s‖ when they are raw (a step shorter than 1), else 1
    scale: float = 1.0


@dataclass(frozen=True)
class PairCache:
    """A client's compact L-BFGS form for one buffer state (`unlearning.lbfgs.CompactForm`, unbatched).

    Valid while the buffer holds the pairs of `rounds`; rebuilt (one SecMI) when a pair enters.
    """

    rounds: tuple[int, ...]
    a: Secret  #: (k, k) SᵀY
    yy: Secret  #: (k, k) YᵀY
    sigma: Secret  #: (1,) σ_k
    dkinv: Secret  #: (2k, 2k) diag(σ_k·I, I)·K⁻¹
    #: the public ŝ rows (k, m) as the backend prepared them for products (not persisted:
    #: a deterministic local encoding, redone after a resume)
    s_rows: Prepared | None = field(default=None, compare=False)


FORM_PARTS = ("a", "yy", "sigma", "dkinv")


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
    forms: dict[str, PairCache] = field(default_factory=dict)
    #: this party's key of the anchored noise (anchor_noise.new_noise_key; None in a checkpoint
    #: that predates it: a resumed run then draws one at its first anchored reveal, release_gate.py)
    noise_key: Secret | None = None

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
            forms=dict(self.forms),
            noise_key=self.noise_key,
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
            **pairs_public(self.buffers, self.forms),
            **release_json(self.log, self.pending),
        }

    def public_tensors(self) -> dict[str, torch.Tensor]:
        return {"model": self.model.clone(), **pairs_tensors(self.buffers)}

    def secrets(self) -> dict[str, Secret]:
        out: dict[str, Secret] = {"deltas": self.deltas}
        if self.noise_key is not None:
            out["noise_key"] = self.noise_key
        return {**out, **held_secret(self.held), **pairs_secrets(self.buffers, self.forms)}

    @classmethod
    def from_parts(
        cls, public: Mapping[str, Any], tensors: Mapping[str, torch.Tensor], secrets: Mapping[str, Secret]
    ) -> StarfishState:
        """Rebuild a state from the three parts; raises ValueError if any part is missing."""
        version = public.get("version")
        if version not in READABLE_VERSIONS:
            raise ValueError(f"unsupported Starfish state version {version!r}")
        with reading("Starfish"):
            buffers, forms = restore_pairs(public, tensors, secrets)
            log, pending, held = restore_release({"pending": {}, **public}, secrets)  # version 1 holds none
            return cls(
                clients=tuple(public["clients"]),
                selected=tuple(sorted(int(r) for r in public["ranked" if version == 1 else "selected"])),
                method=str(public["method"]),
                deltas=secrets["deltas"],
                model=public_model(tensors),
                round=int(public["round"]),
                warmup_pairs=int(public["warmup_pairs"]),
                warmup_over=bool(public["warmup_over"]),
                buffers=buffers,
                log=log,
                pending=pending,
                held=held,
                forms=forms,
                noise_key=secrets.get("noise_key"),
            )


def pairs_public(buffers: Mapping[str, list[CurvaturePair]], forms: Mapping[str, PairCache]) -> dict[str, Any]:
    """The public facts of the L-BFGS buffers and cached compact forms: the round and the
    held rows' scale of every pair."""
    return {
        "buffers": {c: [p.round for p in pairs] for c, pairs in buffers.items()},
        "scales": {c: [p.scale for p in pairs] for c, pairs in buffers.items()},
        "forms": {c: list(form.rounds) for c, form in forms.items()},
    }


def pairs_tensors(buffers: Mapping[str, list[CurvaturePair]]) -> dict[str, torch.Tensor]:
    """The public ŝ of the buffered pairs, once per round (`pairs/s/<round>`)."""
    return {f"pairs/s/{pair.round}": pair.s.clone() for pairs in buffers.values() for pair in pairs}


def pairs_secrets(buffers: Mapping[str, list[CurvaturePair]], forms: Mapping[str, PairCache]) -> dict[str, Secret]:
    """The secret [ŷ], [ŷᵀŷ] rows of every buffered pair and the parts of every cached compact form."""
    out: dict[str, Secret] = {}
    for c, pairs in buffers.items():
        for k, pair in enumerate(pairs):
            out[f"buffer/{c}/{k}/y"] = pair.y
            if pair.yy is not None:
                out[f"buffer/{c}/{k}/yy"] = pair.yy
    for c, form in forms.items():
        for part in FORM_PARTS:
            out[f"form/{c}/{part}"] = getattr(form, part)
    return out


def restore_pairs(
    public: Mapping[str, Any], tensors: Mapping[str, torch.Tensor], secrets: Mapping[str, Secret]
) -> tuple[dict[str, list[CurvaturePair]], dict[str, PairCache]]:
    """The buffers and compact forms `pairs_public`, `pairs_tensors` and `pairs_secrets` stored
    (raises KeyError for a missing part; a layout without scales held normalised rows: 1)."""
    scales = public.get("scales", {})
    buffers = {
        c: [
            CurvaturePair(
                round=int(r),
                s=tensors[f"pairs/s/{int(r)}"] if f"pairs/s/{int(r)}" in tensors else tensors[f"buffer/{c}/{k}/s"],
                y=secrets[f"buffer/{c}/{k}/y"],
                yy=secrets.get(f"buffer/{c}/{k}/yy"),
                scale=float(scales[c][k]) if c in scales else 1.0,
            )
            for k, r in enumerate(rounds)
        ]
        for c, rounds in public["buffers"].items()
    }
    forms = {
        c: PairCache(tuple(int(r) for r in rounds), *(secrets[f"form/{c}/{part}"] for part in FORM_PARTS))
        for c, rounds in public.get("forms", {}).items()
    }
    return buffers, forms
