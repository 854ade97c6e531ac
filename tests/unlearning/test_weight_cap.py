"""The cohort's weight cap over principals (unlearning/weight_cap.py, docs/PRIVACY.md "Weight cap")."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from unlearning.weight_cap import capped_weights, fractions, principal_count

clients = st.dictionaries(st.sampled_from([f"c{i}" for i in range(8)]), st.integers(1, 10**6), min_size=1)
owners = st.dictionaries(st.sampled_from([f"c{i}" for i in range(8)]), st.sampled_from(["p", "q", "r"]))


@given(clients, owners, st.integers(1, 6))
def test_no_principal_holds_more_than_one_kth(n: dict[str, int], principals: dict[str, str], k: int) -> None:
    weights = capped_weights(n, principals, k)
    assume(weights is not None)
    total = sum(weights.values())
    pooled: dict[str, int] = {}
    for c, w in weights.items():
        assert 0 <= w <= n[c]
        pooled[principals.get(c, c)] = pooled.get(principals.get(c, c), 0) + w
    assert k * max(pooled.values()) <= total
    assert total**2 >= k * sum(w * w for w in weights.values())  # (Σw)²/Σw² ≥ k


@given(clients, owners, st.integers(1, 6))
def test_the_cap_exists_iff_k_principals_hold_samples(n: dict[str, int], principals: dict[str, str], k: int) -> None:
    assert (capped_weights(n, principals, k) is None) == (principal_count(n, principals) < k)


@given(st.lists(st.integers(1, 1000), min_size=3, max_size=8), st.integers(2, 3))
def test_balanced_weights_are_unchanged(sizes: list[int], k: int) -> None:
    n = {f"c{i}": s for i, s in enumerate(sizes)}
    assume(k * max(sizes) <= sum(sizes))
    assert capped_weights(n, {}, k) == n


def test_a_huge_weight_is_capped_to_the_others() -> None:
    assert capped_weights({"a": 10**6, "b": 1, "c": 1}, {}, 3) == {"a": 1, "b": 1, "c": 1}
    assert capped_weights({"a": 100, "b": 30, "c": 20, "d": 10}, {}, 3) == {"a": 30, "b": 30, "c": 20, "d": 10}


def test_identities_of_one_principal_count_once_and_share_its_weight() -> None:
    mallory = {"s1": "mallory", "s2": "mallory"}
    assert capped_weights({"a": 5, "s1": 1, "s2": 1}, mallory, 3) is None
    weights = capped_weights({"a": 5, "s1": 1, "s2": 1, "d": 3}, mallory, 3)
    assert weights == {"a": 2, "d": 2, "s1": 1, "s2": 1}
    assert fractions(weights)["a"] == pytest.approx(1 / 3)
