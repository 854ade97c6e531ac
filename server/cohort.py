"""The minimum cohort k of a Stage I round (docs/PRIVACY.md, "Minimum cohort").

A committed round publishes M_i, and with M_{i−1} public, (M_{i−1} − M_i)/η_l =
Σ_{j∈S} n_j·g_j / Σ_{j∈S} n_j, the FedAvg aggregate of the agreed membership S. With
|S| = 1 that is one client's gradient. So a round whose S would have fewer than k =
`[privacy] min_cohort` members does not commit; instead (docs/SERVICE.md, "Round protocol"):

* `[rounds] opening = "auto"`: the round stays open, its deadline is extended and its record
  carries a note (`wait_note`) until k consistent pairs are held. A round with no upload
  at all is an idle deployment, not a round below its cohort: it waits with `idle_note`,
  without a warning or a count in `starfish_rounds_below_cohort_total` (so the
  StarfishRoundBelowCohort alert does not fire on an idle deployment), and a job that
  pauses training ends it at once;
* `opening = "on_request"` (an external server chose the round's clients) and a round an
  unlearning job must end: the round is abandoned on both parties (`abandon_reason`); its
  acknowledged uploads stay stored and count again when round i (same M_{i−1}) opens again.

party1 applies its own k (`refusal`) when party0 asks it to fix a membership or to exchange
aggregate shares, whatever party0's k: neither party helps reveal an aggregate below its k.

The cohort counts principals, not client identities, and weight, not heads: members enrolled
for one principal (`[auth.principals]`) count once, and the aggregate's weights are capped so
that no principal holds more than 1/k of the round's weight (unlearning.weight_cap). party1
derives the weights and principals itself and refuses a membership whose proposed ones differ
(`weights_refusal`).
"""

from __future__ import annotations

from collections.abc import Mapping

from unlearning.weight_cap import capped_weights, principal_count, principal_of


def enrolled(members: Mapping[str, int], configured: Mapping[str, str]) -> dict[str, str]:
    """The configured principals of `members` (a client without one is its own principal)."""
    return {c: configured[c] for c in sorted(members) if c in configured}


def size(members: Mapping[str, int], principals: Mapping[str, str]) -> int:
    """The cohort of a membership: its distinct principals holding samples."""
    return principal_count(members, principals)


def weights_refusal(
    party: int,
    round_index: int,
    members: Mapping[str, int],
    proposed: Mapping[str, tuple[str, int]],
    configured: Mapping[str, str],
    k: int,
) -> tuple[dict[str, int], dict[str, str], str | None]:
    """party`party`'s check of the principals and weights party0 proposes (client → (principal,
    w_j)) against its own enrollment records and its own k: (weights, principals, refusal or None)."""
    principals = enrolled(members, configured)
    for client in sorted(members):
        theirs = principal_of(client, {client: proposed[client][0]} if client in proposed else {})
        if theirs != principal_of(client, principals):
            return (
                {},
                principals,
                (
                    f"round {round_index}: party{party} refuses the membership: client {client!r} is enrolled for "
                    f"principal {principal_of(client, principals)!r} here, {theirs!r} at the other party"
                ),
            )
    weights = capped_weights(members, principals, k)
    if weights is None:
        return {}, principals, refusal(party, round_index, size(members, principals), k)
    differ = sorted(c for c in members if c not in proposed or proposed[c][1] != weights[c])
    if differ:
        return (
            weights,
            principals,
            (
                f"round {round_index}: party{party} refuses the membership: its capped weights for minimum cohort "
                f"{k} differ for {differ} (the parties' [privacy] min_cohort or enrollment differ)"
            ),
        )
    return weights, principals, None


WAIT = "waiting"  #: the round stays open (auto opening)
ABANDON = "abandoned"  #: the round ends without a model
REFUSED = "refused"  #: party1 refused a membership below its k


def must_abandon(opening: str, ending: bool) -> bool:
    """Whether a round below its cohort is abandoned (else it waits, deadline extended)."""
    return ending or opening == "on_request"


def wait_note(round_index: int, consistent: int, k: int) -> str:
    """The note an open round below its cohort carries (round ticket, upload status, log)."""
    return (
        f"round {round_index} waits: {consistent} consistent upload(s), fewer than the minimum cohort "
        f"{k} ([privacy] min_cohort; uploads of one principal count once); the deadline was extended"
    )


def idle_note(round_index: int) -> str:
    """The note of an open round that no client has uploaded to (an idle deployment): it waits,
    and this is neither a warning nor a round below its cohort (no metric counts it)."""
    return f"round {round_index} waits for uploads (none yet); the deadline was extended"


def abandon_reason(round_index: int, consistent: int, k: int, paused: bool) -> str:
    """Why a round below its cohort ended without a model (both parties record it)."""
    cause = "an unlearning job paused training" if paused else "the round closed"
    return (
        f"round {round_index} abandoned: {cause} with {consistent} consistent upload(s), fewer than the "
        f"minimum cohort {k} (uploads of one principal count once); its uploads are kept, not aggregated, "
        f"and count when round {round_index} "
        "opens again (or submit to the next round)"
    )


def refusal(party: int, round_index: int, members: int, k: int) -> str | None:
    """party`party`'s refusal to aggregate a membership of `members` principals (None: at least k)."""
    if members >= k:
        return None
    return (
        f"round {round_index}: party{party} refuses a membership of {members} client(s), fewer than its "
        f"minimum cohort {k} ([privacy] min_cohort; members enrolled for one principal count once)"
    )
