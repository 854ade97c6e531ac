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
"""

from __future__ import annotations

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
        f"{k} ([privacy] min_cohort); the deadline was extended"
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
        f"minimum cohort {k}; its uploads are kept, not aggregated, and count when round {round_index} "
        "opens again (or submit to the next round)"
    )


def refusal(party: int, round_index: int, members: int, k: int) -> str | None:
    """party`party`'s refusal to aggregate a membership of `members` clients (None: at least k)."""
    if members >= k:
        return None
    return (
        f"round {round_index}: party{party} refuses a membership of {members} client(s), fewer than its "
        f"minimum cohort {k} ([privacy] min_cohort)"
    )
