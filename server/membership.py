"""Who counts in a round: the agreed membership S and the excluded uploads (round close, step 3).

A client is a member of round i when both parties hold an upload of it with equal n_j and
equal binding (proto.binding: the two halves come from one sharing). Every other upload
held by either party is excluded with a reason that both parties record and serve to the
client (GetUploadStatus); the sum Σ_{j∈S} n_j is kept within the round's sample budget
(server.headroom). `exclusion_reason` and `follower_refusal` are where a mismatch is decided.
"""

from __future__ import annotations

from dataclasses import dataclass

from server.headroom import trim_to_budget

OVER_BUDGET = "the round's Σ n_j would exceed its sample budget (the aggregate could wrap)"


@dataclass(frozen=True)
class Held:
    """What one party holds of a client's upload for the round: public n_j and the binding."""

    n_samples: int
    binding_sha256: str


def exclusion(at0: Held | None, at1: Held | None) -> tuple[str, str] | None:
    """(short code, reason) why a client's upload cannot join the aggregate, or None when its
    pair is consistent. The codes label the share-pair mismatch metric (server.metrics)."""
    if at0 is None:
        return "one_sided", "only party1 holds an upload (party0 did not receive it before the round closed)"
    if at1 is None:
        return "one_sided", "only party0 holds an upload (party1 did not receive it before the round closed)"
    if at0.n_samples != at1.n_samples:
        return "n_samples", f"the parties hold different n_j (party0: {at0.n_samples}, party1: {at1.n_samples})"
    if not at0.binding_sha256 or not at1.binding_sha256:
        return "unbound", "an upload without a share binding cannot be checked for consistency"
    if at0.binding_sha256 != at1.binding_sha256:
        return "binding", "the parties hold halves of different sharings (their bindings differ)"
    return None


def exclusion_reason(at0: Held | None, at1: Held | None) -> str | None:
    """Why a client's upload cannot join the aggregate, or None when its pair is consistent."""
    found = exclusion(at0, at1)
    return None if found is None else found[1]


def decide(at0: dict[str, Held], at1: dict[str, Held], budget: int) -> tuple[dict[str, int], dict[str, str]]:
    """(S as client → n_j, excluded client → reason) from the uploads each party holds."""
    members: dict[str, int] = {}
    excluded: dict[str, str] = {}
    for client in sorted(set(at0) | set(at1)):
        found = exclusion(at0.get(client), at1.get(client))
        if found is None:
            members[client] = at0[client].n_samples
        else:
            excluded[client] = found[1]
    members, over = trim_to_budget(members, budget)
    excluded.update(dict.fromkeys(over, OVER_BUDGET))
    return members, excluded


def follower_refusal(client: str, n_samples: int, binding_sha256: str, mine: Held | None) -> str | None:
    """The follower's re-check of one agreed member against its own store (None: it agrees)."""
    if mine is None or mine.n_samples != n_samples:
        return f"holds no matching upload of {client!r}"
    if mine.binding_sha256 != binding_sha256:
        return f"holds a half of another sharing of {client!r} (binding differs)"
    return None
