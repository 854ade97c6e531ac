"""The differential-privacy settings of `[privacy]` (docs/PRIVACY.md, "Differential privacy").

    [privacy]
    dp = false                 # off by default
    clip = 1.0                 # C: per-client L2 clipping norm
    noise_multiplier = 1.0     # z: σ = z·C·max_j w_j per revealed aggregate
    # epsilon = 8.0            # or: a target ε, with planned_releases, instead of z
    # planned_releases = 60    # releases one client may take part in (Stage I + Stage II)
    delta = 1e-5
    schedule = "fixed"         # or "fedadp" (FedADP's adaptive calibration)

The same table holds the minimum-cohort setting (`min_cohort`), parsed elsewhere and
ignored here. With `epsilon`, z is the smallest noise multiplier for which Opacus's RDP
accountant gives ε over `planned_releases` Gaussian releases (`get_noise_multiplier`).
Validated once when the configuration is read; a bad value is a `ValueError` naming the key.

`DPSettings` is what the mechanism needs (C, z, δ, schedule; `privacy.distributed`);
`DPConfig` adds what the table said about ε. Imports nothing of torch: the party reads its
configuration without loading it (Opacus, which does, only when `epsilon` is given).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

SCHEDULES = ("fixed", "fedadp")
FEDADP_MAX_GROWTH = 2.0
"""ε_max / ε_0 of the "fedadp" schedule: the step budget may at most double (noise halve)."""


@dataclass(frozen=True)
class DPSettings:
    """Clipping norm C, noise multiplier z, δ, and the schedule of z (module docstring)."""

    clip: float
    noise_multiplier: float
    delta: float
    schedule: str = "fixed"

    def __post_init__(self) -> None:
        if not math.isfinite(self.clip) or self.clip <= 0:
            raise ValueError(f"privacy.clip must be a finite number > 0, got {self.clip!r}")
        if not math.isfinite(self.noise_multiplier) or self.noise_multiplier < 0:
            raise ValueError(f"privacy.noise_multiplier must be a finite number >= 0, got {self.noise_multiplier!r}")
        if not 0 < self.delta < 1:
            raise ValueError(f"privacy.delta must be in (0, 1), got {self.delta!r}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"privacy.schedule must be one of {list(SCHEDULES)}, got {self.schedule!r}")
        if self.schedule == "fedadp" and self.noise_multiplier == 0:
            raise ValueError("privacy.schedule = 'fedadp' needs privacy.noise_multiplier > 0")


OTHER_PRIVACY_KEYS = frozenset({"min_cohort"})
"""Keys of `[privacy]` that other settings own."""
DP_KEYS = frozenset({"dp", "clip", "noise_multiplier", "epsilon", "planned_releases", "delta", "schedule"})


@dataclass(frozen=True)
class DPConfig:
    """`[privacy]`'s DP keys; `settings` is None when DP is off."""

    dp: bool = False
    settings: DPSettings | None = None
    epsilon_target: float | None = None
    planned_releases: int | None = None


def _number(table: dict[str, Any], key: str, default: float) -> float:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"privacy.{key} must be a finite number, got {value!r}")
    return float(value)


def _multiplier_for(table: dict[str, Any], delta: float) -> tuple[float, float | None, int | None]:
    """(z, ε target, planned releases): z given, or derived from ε over the planned releases."""
    if "epsilon" not in table:
        if "planned_releases" in table:
            raise ValueError("privacy.planned_releases is only used with privacy.epsilon")
        return _number(table, "noise_multiplier", 1.0), None, None
    if "noise_multiplier" in table:
        raise ValueError("give privacy.noise_multiplier or privacy.epsilon, not both")
    epsilon = _number(table, "epsilon", 0.0)
    releases = table.get("planned_releases")
    if not isinstance(releases, int) or isinstance(releases, bool) or releases < 1:
        raise ValueError(f"privacy.epsilon needs privacy.planned_releases, an int >= 1, got {releases!r}")
    if epsilon <= 0:
        raise ValueError(f"privacy.epsilon must be > 0, got {epsilon!r}")
    from opacus.accountants.utils import get_noise_multiplier

    z = get_noise_multiplier(
        target_epsilon=epsilon, target_delta=delta, sample_rate=1.0, steps=releases, accountant="rdp"
    )
    return float(z), epsilon, releases


def parse_dp_config(table: dict[str, Any]) -> DPConfig:
    """The DP keys of a parsed `[privacy]` table (module docstring); raises ValueError."""
    unknown = sorted(set(table) - DP_KEYS - OTHER_PRIVACY_KEYS)
    if unknown:
        raise ValueError(f"unknown key(s) {unknown} in [privacy]")
    dp = table.get("dp", False)
    if not isinstance(dp, bool):
        raise ValueError(f"privacy.dp must be true or false, got {dp!r}")
    if not dp:
        return DPConfig()
    delta = _number(table, "delta", 1e-5)
    schedule = table.get("schedule", "fixed")
    if not isinstance(schedule, str):
        raise ValueError(f"privacy.schedule must be a string, got {schedule!r}")
    if not 0 < delta < 1:
        raise ValueError(f"privacy.delta must be in (0, 1), got {delta!r}")
    z, epsilon, releases = _multiplier_for(table, delta)
    settings = DPSettings(clip=_number(table, "clip", 1.0), noise_multiplier=z, delta=delta, schedule=schedule)
    return DPConfig(True, settings, epsilon, releases)
