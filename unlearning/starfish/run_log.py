"""The typed log of a Starfish run: what happened in each unlearning round (all public).

One `StarfishLog` travels in the resumable state (so a resumed run keeps its history) and
is the source of the report (`run_report`). Its JSON form (`to_json` / `from_json`) is
what a checkpoint stores; reading fills absent sections with their empty value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class RoundEntry:
    """Unlearning round t replayed stored round `round` with `participants` remaining clients.

    kind: "skipped" (no participant or no answer), "stored" (s = 0: the stored uploads are
    exact at M̂_t), "warmup" (exact gradients), "estimate"
    (SecUE), "check" (SecUE and SecTC) or "recovery" (a FedAvg round after the replay, with
    the data order of stored round `round`; recovery.py); eta_u is the unlearning rate applied (absent when skipped).
    """

    t: int
    round: int
    participants: int
    kind: str
    eta_u: float | None = None

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        if self.eta_u is None:
            del out["eta_u"]
        return out


@dataclass
class FlagEntry:
    """The SecTC flags revealed in unlearning round t (stored round `round`), per client."""

    t: int
    round: int
    flags: dict[str, bool]


@dataclass
class AskEntry:
    """Clients asked for exact gradients in round t ("warmup", "correction" or "recovery") and who answered."""

    t: int
    round: int
    reason: str
    asked: list[str]
    answered: list[str]
    missing: list[str]


@dataclass
class CurvatureEntry:
    """The revealed curvature-safeguard bit of one client's L-BFGS pair from round `round`."""

    round: int
    client: str
    accepted: bool


@dataclass
class ReleaseEntry:
    """The release rule's decision after unlearning round t (release.py).

    action: "revealed" (the sum of `steps`' updates became public), "held" (kept secret, to
    be merged into a later step), "dropped" (still held when the run ended; never revealed
    nor applied) or "excluded" (a step with fewer than k remaining participants: its update
    is discarded, never revealed, merged nor applied); support: the smallest client count
    of a combination of the update with public Stage I aggregates (for "excluded", the
    step's participants).
    """

    t: int
    action: str
    steps: list[int]
    support: int
    #: clients whose answer in step t became a pair only, their estimate being published
    #: (an update was held at a Stage I model point; release.py)
    kept_estimates: list[str] = field(default_factory=list)
    #: stored rounds i at whose model M_{i−1} a revealed step was taken: the reveal carried
    #: the anchored noise (anchor_noise.py)
    noised_for: list[int] = field(default_factory=list)


@dataclass
class StarfishLog:
    """Everything public a run records; written by the strategy, SecUE and the correction step."""

    request: dict[str, Any] = field(default_factory=dict)  #: targets and parameters of the run
    rounds: list[RoundEntry] = field(default_factory=list)
    flags: list[FlagEntry] = field(default_factory=list)
    corrections: list[AskEntry] = field(default_factory=list)
    curvature: list[CurvatureEntry] = field(default_factory=list)
    releases: list[ReleaseEntry] = field(default_factory=list)
    asked: dict[str, int] = field(default_factory=dict)  #: T_r^j: rounds client j was asked in
    inverses: int = 0  #: SecMI calls (one masked N = K·R revealed each)
    resumed_at: list[int] = field(default_factory=list)  #: rounds a resumed run restarted after

    def record_ask(self, t: int, r: int, reason: str, clients: Sequence[str], answered: Sequence[str]) -> None:
        """Note that `clients` were asked in round t and which of them answered."""
        for client in clients:
            self.asked[client] = self.asked.get(client, 0) + 1
        got = set(answered)
        self.corrections.append(
            AskEntry(
                t, r, reason, list(clients), [c for c in clients if c in got], [c for c in clients if c not in got]
            )
        )

    def answered(self, reason: str) -> tuple[int, int]:
        """(answers received, answers missing) over the asks of `reason`."""
        events = [e for e in self.corrections if e.reason == reason]
        return sum(len(e.answered) for e in events), sum(len(e.missing) for e in events)

    def to_json(self) -> dict[str, Any]:
        return {
            "request": dict(self.request),
            "rounds": [e.to_json() for e in self.rounds],
            "flags": [asdict(e) for e in self.flags],
            "corrections": [asdict(e) for e in self.corrections],
            "curvature": [asdict(e) for e in self.curvature],
            "releases": [asdict(e) for e in self.releases],
            "asked": dict(self.asked),
            "inverses": self.inverses,
            "resumed_at": list(self.resumed_at),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StarfishLog:
        return cls(
            request=dict(data.get("request", {})),
            rounds=[RoundEntry(**e) for e in data.get("rounds", [])],
            flags=[FlagEntry(**e) for e in data.get("flags", [])],
            corrections=[AskEntry(**e) for e in data.get("corrections", [])],
            curvature=[CurvatureEntry(**e) for e in data.get("curvature", [])],
            releases=[ReleaseEntry(**e) for e in data.get("releases", [])],
            asked={str(c): int(n) for c, n in data.get("asked", {}).items()},
            inverses=int(data.get("inverses", 0)),
            resumed_at=[int(r) for r in data.get("resumed_at", [])],
        )
