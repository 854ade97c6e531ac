"""(ε, δ) of the released aggregates per client and per job, by Opacus's RDP accountant.

Each `Release` is one Gaussian mechanism with noise multiplier z on every member
(sampling rate 1: a member's clipped contribution is always in; docs/PRIVACY.md). A
client's guarantee composes the releases it is a member of — Stage I rounds it uploaded
to and Stage II steps it took part in — with Rényi DP (`opacus.accountants.RDPAccountant`,
maintained by the Opacus project), converted to (ε, δ). The job's ε is the largest over
its clients. A release with z = 0 gives ε = ∞.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable

from privacy.release_log import Release


def client_epsilon(multipliers: Iterable[float], delta: float) -> float:
    """ε at δ of composing Gaussian mechanisms with the given noise multipliers (RDP)."""
    counts = Counter(multipliers)
    if not counts:
        return 0.0
    if any(z <= 0 for z in counts):
        return math.inf
    from opacus.accountants import RDPAccountant  # loads torch: only when a report is made

    accountant = RDPAccountant()
    accountant.history = [(z, 1.0, steps) for z, steps in sorted(counts.items())]
    return float(accountant.get_epsilon(delta))


def epsilon_per_client(releases: Iterable[Release], delta: float) -> dict[str, float]:
    """ε of every client that is a member of some release, at δ."""
    per_client: dict[str, list[float]] = {}
    for release in releases:
        for member in release.members:
            per_client.setdefault(member, []).append(release.noise_multiplier)
    return {c: client_epsilon(zs, delta) for c, zs in sorted(per_client.items())}


def privacy_report(releases: Iterable[Release], delta: float) -> dict[str, object]:
    """JSON-ready accounting: δ, the job's ε (worst client), each client's ε, the releases."""
    listed = list(releases)
    clients = epsilon_per_client(listed, delta)
    worst = max(clients.values(), default=0.0)
    return {
        "accountant": "opacus RDP",
        "delta": delta,
        "epsilon": _json_number(worst),
        "per_client": {c: _json_number(e) for c, e in clients.items()},
        "releases": [r.as_dict() for r in listed],
    }


def _json_number(value: float) -> float | str:
    return value if math.isfinite(value) else "inf"
