"""The certificate's canonical JSON (RFC 8785) and signing payload (`proto.certificate`):
the RFC's own example, properties over generated JSON values (Hypothesis), the values that
have no canonical form, and signatures bound to the signer and time."""

from __future__ import annotations

import json

import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from hypothesis import given
from hypothesis import strategies as st

from proto.certificate import (
    CanonicalError,
    canonical_json,
    parse_utc_iso,
    sign,
    signature_valid,
    signing_payload,
    utc_iso,
)

finite = st.floats(allow_nan=False, allow_infinity=False)
scalars = st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | finite | st.text()
values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4)
)


def test_the_rfc_8785_example():
    source = (
        '{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001],'
        '"string":"\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/","literals":[null,true,false]}'
    )
    expected = (
        '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
        '"string":"€$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
    )
    assert canonical_json(json.loads(source)).decode("utf-8") == expected


@given(values)
def test_canonical_form_is_a_fixed_point_and_keeps_the_value(value):
    text = canonical_json(value)
    parsed = json.loads(text)
    assert canonical_json(parsed) == text
    assert _same(parsed, value)


def _same(a, b) -> bool:
    """Equal JSON values; a float ≥ 2^53 may come back as the int of equal value."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return float(a) == float(b)
    return a == b


@given(st.dictionaries(st.text(), scalars, min_size=2, max_size=8))
def test_key_order_does_not_matter(d):
    assert canonical_json(dict(reversed(list(d.items())))) == canonical_json(d)


@given(finite)
def test_numbers_round_trip_exactly(x):
    text = canonical_json(x).decode()
    assert float(text) == x
    assert ("e" in text) == (x != 0 and not 1e-6 <= abs(x) < 1e21)


def test_large_integers_are_written_as_the_nearest_double():
    assert canonical_json(2**60) == b"1152921504606847000" and float(1152921504606847000) == 2**60
    assert canonical_json(70049110943743870) == canonical_json(70049110943743872) == b"70049110943743870"


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 2**1024, {1: "x"}, "\ud800", object()])
def test_values_without_a_canonical_form_are_refused(value):
    with pytest.raises(CanonicalError):
        canonical_json(value)


def test_a_signature_is_bound_to_the_signer_and_the_time():
    key = ec.generate_private_key(ec.SECP256R1())
    statement = {"job": {"id": "j1"}}
    now = utc_iso(1_800_000_000.25)
    assert parse_utc_iso(now).timestamp() == 1_800_000_000.25
    algorithm, signature = sign(key, signing_payload(statement, "party0", now))
    assert algorithm == "ecdsa-secp256r1-sha256"
    assert signature_valid(key.public_key(), algorithm, signing_payload(statement, "party0", now), signature)
    assert not signature_valid(key.public_key(), algorithm, signing_payload(statement, "party1", now), signature)
    later = utc_iso(1_800_000_001.0)
    assert not signature_valid(key.public_key(), algorithm, signing_payload(statement, "party0", later), signature)
    assert not signature_valid(key.public_key(), "ed25519", signing_payload(statement, "party0", now), signature)
    assert not signature_valid(key.public_key(), algorithm, signing_payload(statement, "party0", now), "not base64!")
