"""One published aggregate of the release log: its label, noise multiplier and members.

Every noised reveal (Stage I round, Stage II step) appends one `Release`; the accountant
(`privacy.accountant`) composes, per client, the releases it is a member of.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Release:
    """One published aggregate: what it is, its noise multiplier, and who is in it."""

    label: str
    noise_multiplier: float
    members: tuple[str, ...]

    @property
    def cohort(self) -> int:
        return len(self.members)

    def as_dict(self) -> dict[str, object]:
        return {"label": self.label, "noise_multiplier": self.noise_multiplier, "cohort": self.cohort}
