"""Cohorts that count weight and principals (docs/PRIVACY.md, "Minimum cohort").

FedAvg publishes G = Σ_j w_j·g_j / Σ_j w_j. With self-reported weights n_j, one client with
n_A = 10^6 among clients with n = 1 makes G ≈ g_A however many members there are; and one
organisation enrolled under several client identities counts several times. So the weights
of a published aggregate are capped by water-filling over *principals* (the organisation a
client identity was enrolled for; a client without one is its own principal):

    N_P = Σ_{j∈P} n_j,   c = max{ c ∈ ℕ : k·c ≤ Σ_P min(N_P, c) },   W_P = min(N_P, c),

and W_P is apportioned among P's members in proportion to n_j (largest remainder, ties by
client id), so w_j = n_j whenever N_P ≤ c. Then every principal's pooled weight W_P ≤ c ≤
W/k with W = Σ_P W_P, hence (Σ_j w_j)²/Σ_j w_j² ≥ W/max_P W_P ≥ k: the effective number of
contributors is at least k = `min_cohort`, and no principal moves G by more than 1/k of it.
The cap exists iff at least k principals hold samples (f(c) = Σ_P min(N_P, c) − k·c is
concave with f(0) = 0, so {c : f(c) ≥ 0} is an interval and c is found by bisection);
otherwise the cohort is below k. The weights are integers no larger than n_j, so Σ w_j ≤
Σ n_j stays within the round's sample budget (server.headroom), and every party derives the
same weights from the same membership, principals and k.
"""

from __future__ import annotations

from collections.abc import Mapping


def principal_of(client: str, principals: Mapping[str, str]) -> str:
    """The principal `client` was enrolled for; a client without one is its own principal."""
    return principals.get(client) or client


def pooled(weights: Mapping[str, int], principals: Mapping[str, str]) -> dict[str, dict[str, int]]:
    """principal → {client → n_j} over the clients of `weights`."""
    out: dict[str, dict[str, int]] = {}
    for client in sorted(weights):
        out.setdefault(principal_of(client, principals), {})[client] = int(weights[client])
    return out


def principal_count(weights: Mapping[str, int], principals: Mapping[str, str]) -> int:
    """How many distinct principals hold samples among the clients of `weights`."""
    return sum(1 for members in pooled(weights, principals).values() if sum(members.values()) > 0)


def _cap(totals: list[int], k: int) -> int:
    """c = max{c ≥ 0 : k·c ≤ Σ_P min(N_P, c)} by bisection (the predicate holds on an interval from 0)."""
    low, high = 0, max(totals)
    while low < high:
        mid = (low + high + 1) // 2
        if k * mid <= sum(min(n, mid) for n in totals):
            low = mid
        else:
            high = mid - 1
    return low


def _apportion(members: Mapping[str, int], total: int) -> dict[str, int]:
    """Split the integer `total` among `members` in proportion to n_j (largest remainder)."""
    size = sum(members.values())
    if total >= size:
        return dict(members)
    share = {c: n * total // size for c, n in members.items()}
    order = sorted(members, key=lambda c: (-(members[c] * total % size), c))
    for client in order[: total - sum(share.values())]:
        share[client] += 1
    return share


def capped_weights(weights: Mapping[str, int], principals: Mapping[str, str], k: int) -> dict[str, int] | None:
    """The capped integer weights w_j ≤ n_j of the module docstring, or None when fewer than k
    principals hold samples (the cohort is below k)."""
    if k < 1:
        raise ValueError(f"min_cohort must be at least 1, got {k}")
    groups = pooled(weights, principals)
    totals = [sum(m.values()) for m in groups.values() if sum(m.values()) > 0]
    if len(totals) < k:
        return None
    cap = _cap(totals, k)
    out: dict[str, int] = {}
    for members in groups.values():
        out.update(_apportion(members, min(sum(members.values()), cap)))
    return out


def fractions(weights: Mapping[str, int]) -> dict[str, float]:
    """w_j / Σ_k w_k (FedAvg's normalised weights)."""
    total = sum(weights.values())
    if total <= 0:
        raise ValueError(f"clients {sorted(weights)} hold no weight")
    return {c: w / total for c, w in weights.items()}
