"""Deciding a round's membership from the two parties' uploads: consistent pairs only, every
other upload excluded with its reason; the follower re-checks members against its store."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from server import membership
from server.membership import Held, decide, exclusion_reason, follower_refusal

BIG = 10**9

held = st.builds(Held, st.integers(1, 3), st.sampled_from(["", "b1", "b2"]))
uploads = st.dictionaries(st.sampled_from(["a", "b", "c", "d", "e"]), held, max_size=5)


@given(uploads, uploads)
def test_members_are_exactly_the_consistent_pairs(at0, at1):
    members, excluded = decide(at0, at1, BIG)
    assert set(members) | set(excluded) == set(at0) | set(at1)
    assert not set(members) & set(excluded)
    for client, n in members.items():
        assert at0[client] == at1[client] == Held(n, at0[client].binding_sha256) and at0[client].binding_sha256
    for client in excluded:
        assert client not in at0 or client not in at1 or at0[client] != at1[client] or not at0[client].binding_sha256


def test_each_reason_names_the_problem():
    ok = Held(5, "x")
    assert exclusion_reason(ok, ok) is None
    assert "only party0" in exclusion_reason(ok, None)
    assert "only party1" in exclusion_reason(None, ok)
    assert "different n_j (party0: 5, party1: 6)" in exclusion_reason(ok, Held(6, "x"))
    assert "halves of different sharings" in exclusion_reason(ok, Held(5, "y"))
    assert "without a share binding" in exclusion_reason(Held(5, ""), Held(5, ""))


def test_follower_refuses_members_it_cannot_match():
    assert follower_refusal("a", 5, "x", Held(5, "x")) is None
    assert "holds no matching upload of 'a'" in follower_refusal("a", 5, "x", None)
    assert "holds no matching upload of 'a'" in follower_refusal("a", 5, "x", Held(4, "x"))
    assert "another sharing of 'a'" in follower_refusal("a", 5, "x", Held(5, "y"))


def test_budget_applies_after_the_consistency_check():
    at0 = {"a": Held(70, "x"), "b": Held(40, "y"), "c": Held(40, "z")}
    at1 = {"a": Held(70, "other"), "b": Held(40, "y"), "c": Held(40, "z")}
    members, excluded = decide(at0, at1, budget=100)
    assert members == {"b": 40, "c": 40}  # a's pair is inconsistent, so b and c fit
    assert excluded == {"a": exclusion_reason(at0["a"], at1["a"])}
    assert decide(at0, at0, budget=100)[1] == {"a": membership.OVER_BUDGET}
