"""The SDK's sharing, binding and outbox, without parties.

* Binding (proto.binding): each half verifies only as its own party's half; two sharings of the
  same gradient have different bindings; any change to a half or its public facts is caught.
* Outbox: a sharing survives a restart byte for byte, files are private, acknowledgements
  are durable, the shares are deleted once both parties acknowledged, corruption is detected.
* Retry back-off stays within its jittered, capped bounds.
"""

from __future__ import annotations

import dataclasses
import json
import stat

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from client_sdk.outbox import Outbox, OutboxError, federation_id
from client_sdk.retry import RetryPolicy
from client_sdk.sharing import make_sharing
from mpc.fixedpoint import decode, from_wire
from mpc.masks import expand_mask
from proto import binding

H = "ab" * 32


def _sharing(g: np.ndarray, n: int = 7, compress: bool = True, target: str = "round:3"):
    return make_sharing("alice", target, g, n, H, (16, 2.0**20), 0.4, compress)


def _facts(s, of: int, **change) -> binding.HalfFacts:
    """The facts of half `of` as its party would compute them, with `change` applied."""
    half = s.halves[of]
    facts = binding.HalfFacts(
        of, s.target, s.n_samples, s.model_hash, s.num_params, half.content_sha256, half.norm, half.delta
    )
    return dataclasses.replace(facts, **change)


def _verify(s, party: int, facts: binding.HalfFacts) -> str:
    return binding.verify(s.sharing_id, list(s.commitments), s.halves[party].nonce, facts)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(-100, 100), min_size=1, max_size=40), st.booleans())
def test_halves_bind_to_one_sharing_and_reconstruct_the_gradient(values, compress):
    g = np.array(values)
    s = _sharing(g, compress=compress)
    assert _verify(s, 0, _facts(s, 0)) == _verify(s, 1, _facts(s, 1)) == s.binding_sha256
    with pytest.raises(binding.BindingError):
        _verify(s, 0, _facts(s, 1, party=0))  # half 1 offered to party0
    other = _sharing(g, compress=compress)
    assert other.binding_sha256 != s.binding_sha256  # same gradient, another sharing
    shares = [
        expand_mask(h.seed, g.size) if h.seed else from_wire(h.data, (g.size,)) for h in s.halves
    ]  # the party holding the seed expands it
    with np.errstate(over="ignore"):
        assert np.allclose(decode(shares[0] + shares[1]), g, atol=2.0**-16)


@pytest.mark.parametrize(
    "change",
    [
        {"n_samples": 8},
        {"model_hash": "cd" * 32},
        {"target": "round:4"},
        {"num_params": 5},
        {"content_sha256": "0" * 64},
        {"norm_share": bytes(8)},
        {"delta_share": bytes(8)},
    ],
)
def test_any_change_to_a_half_breaks_its_commitment(change):
    s = _sharing(np.linspace(-1, 1, 4))
    with pytest.raises(binding.BindingError, match="does not match its commitment"):
        _verify(s, 1, _facts(s, 1, **change))


def test_outbox_keeps_a_sharing_across_restarts_privately(tmp_path):
    s = _sharing(np.linspace(-1, 1, 50), compress=False)
    box = Outbox(tmp_path / "box")
    entry = box.save(s, deadline=123.0)
    again = Outbox(tmp_path / "box").load("round:3")  # a new process
    assert again.sharing == s and again.deadline == 123.0 and again.acked == (False, False)
    assert again.fingerprint == entry.fingerprint and again.binding_sha256 == s.binding_sha256
    assert stat.S_IMODE((tmp_path / "box").stat().st_mode) == 0o700
    for path in (tmp_path / "box").iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    record = json.loads((tmp_path / "box" / "round-00000003.json").read_text())
    assert s.halves[0].data.hex() not in json.dumps(record)  # the record holds no share


def test_acknowledgements_are_durable_and_compact_the_entry(tmp_path):
    s = _sharing(np.ones(20))
    box = Outbox(tmp_path / "box")
    box.save(s, deadline=0.0)
    box.record_ack("round:3", 1, duplicate=True)
    assert Outbox(tmp_path / "box").load("round:3").acked == (False, True)
    done = box.record_ack("round:3", 0, duplicate=False)
    assert done.sharing is None and done.duplicate == (False, True)
    assert not (tmp_path / "box" / "round-00000003.shares").exists()
    reopened = Outbox(tmp_path / "box").load("round:3")
    assert reopened.acked == (True, True) and reopened.sharing is None and reopened.n_samples == 7
    box.remove("round:3")
    assert Outbox(tmp_path / "box").load("round:3") is None and box.targets() == []


def test_shares_left_beside_a_compacted_record_are_deleted_on_load(tmp_path):
    """A crash after the compacted record was renamed but before the shares were unlinked
    must not leave the shares on disk."""
    box = Outbox(tmp_path / "box")
    box.save(_sharing(np.ones(20), target="round:5"), deadline=0.0)
    shares = tmp_path / "box" / "round-00000005.shares"
    kept = shares.read_bytes()
    box.record_ack("round:5", 0, duplicate=False)
    box.record_ack("round:5", 1, duplicate=False)
    shares.write_bytes(kept)  # as if the unlink had not reached the disk
    entry = Outbox(tmp_path / "box").load("round:5")
    assert entry.sharing is None and entry.acked == (True, True) and not shares.exists()


def test_corrupted_or_orphaned_files(tmp_path):
    box = Outbox(tmp_path / "box")
    box.save(_sharing(np.ones(20), target="round:1"), deadline=0.0)
    shares = tmp_path / "box" / "round-00000001.shares"
    data = bytearray(shares.read_bytes())
    data[5] ^= 1
    shares.write_bytes(bytes(data))
    with pytest.raises(OutboxError, match="do not match their record"):
        Outbox(tmp_path / "box").load("round:1")
    orphan = tmp_path / "box" / "round-00000002.shares"  # written, but its record never was: never sent
    orphan.write_bytes(b"x")
    assert Outbox(tmp_path / "box").load("round:2") is None and not orphan.exists()
    assert Outbox(tmp_path / "box").targets() == ["round:1"]


def test_task_targets_and_deployments_get_distinct_names(tmp_path):
    box = Outbox(tmp_path / "box")
    box.save(_sharing(np.ones(3), target="task:../../etc"), deadline=0.0)
    assert box.load("task:../../etc").target == "task:../../etc"
    assert all(p.parent == tmp_path / "box" for p in (tmp_path / "box").iterdir())
    assert federation_id(b"ca", "a:1", "b:2") != federation_id(b"ca", "a:1", "b:3")


def test_backoff_is_capped_and_jittered():
    policy = RetryPolicy(backoff_s=0.2, max_backoff_s=5.0, budget_s=30.0)
    for retry in range(1, 12):
        cap = min(5.0, 0.2 * 2 ** (retry - 1))
        assert all(cap / 2 <= policy.delay(retry) <= cap for _ in range(20))
    assert policy.upload_until(deadline=1000.0, now=900.0) == 1010.0  # the deadline plus the grace
    assert policy.upload_until(deadline=1000.0, now=995.0) == 1025.0  # at least the call budget
    assert RetryPolicy(upload_budget_s=2.0).upload_until(deadline=1e9, now=10.0) == 12.0
    with pytest.raises(ValueError):
        RetryPolicy(backoff_s=6.0, max_backoff_s=5.0)
