"""The SDK against real party processes: what is uploaded, and every refusal it must name."""

from __future__ import annotations

import socket

import numpy as np
import pytest

from client_sdk import (
    AuthenticationError,
    BadRoundError,
    Client,
    ConflictingUploadError,
    EncodingError,
    ModelMismatchError,
    NotRegisteredError,
    PartyUnreachableError,
    l2_norm,
    tolerance_threshold,
)
from client_sdk.client import model_party
from mpc.fixedpoint import reconstruct
from proto.wire import model_hash
from server.store import Store

pytestmark = pytest.mark.timeout(300)
M = 48


def _uploaded(dep, party: int) -> set[str]:
    return set(Store(dep.data_dir(party), party, readonly=True).uploads(1))


@pytest.mark.parametrize("cid, compress", [("a0", True), ("a3", False)])
def test_submit_shares_gradient_norm_and_delta(sdk_parties, cid, compress):
    """Party1's share travels as a 33-byte seed (compress) or in full; both reconstruct g."""
    g = np.random.default_rng(1).normal(size=M)
    with sdk_parties.client(cid, alpha=0.25, compress_mask=compress) as c:
        view = c.wait_for_round(0, timeout_s=90)
        model = c.fetch_model()
        assert model.hash == view.model_hash and model.params.shape == (M,)
        receipt = c.submit(view.round, g, 12)
    assert receipt.round == 1 and receipt.content_sha256[0] != receipt.content_sha256[1]
    b0 = Store(sdk_parties.data_dir(0), 0, readonly=True).load_share(1, cid)
    b1 = Store(sdk_parties.data_dir(1), 1, readonly=True).load_share(1, cid)
    assert b0.n_samples == b1.n_samples == 12
    assert np.allclose(reconstruct(b0.gradient, b1.gradient), g, atol=2.0**-16)
    assert np.isclose(reconstruct(b0.norm, b1.norm)[0], l2_norm(g), atol=2.0**-16)
    assert np.isclose(reconstruct(b0.delta, b1.delta)[0], tolerance_threshold(g, 0.25), atol=2.0**-16)


def test_resubmitting_different_values_is_a_conflict(sdk_parties):
    with sdk_parties.client("a1") as c:
        c.submit(1, np.ones(M), 3)
        with pytest.raises(ConflictingUploadError, match="cannot be replaced"):
            c.submit(1, np.full(M, 2.0), 3)
    b = Store(sdk_parties.data_dir(0), 0, readonly=True).load_share(1, "a1")
    b1 = Store(sdk_parties.data_dir(1), 1, readonly=True).load_share(1, "a1")
    assert np.allclose(reconstruct(b.gradient, b1.gradient), 1.0)


@pytest.mark.parametrize(
    "bad, match",
    [
        (np.full(M, np.nan), "non-finite"),
        (np.concatenate([np.ones(M - 1), [np.inf]]), "non-finite"),
        (np.full(M, 1e9), "exceeds the encodable range"),
        (np.ones(M, dtype=np.int64), "floating-point"),
    ],
)
def test_bad_values_are_refused_before_sending(sdk_parties, bad, match):
    with sdk_parties.client("a2") as c:
        with pytest.raises(EncodingError, match=match):
            c.submit(1, bad, 5)
    assert "a2" not in _uploaded(sdk_parties, 0) and "a2" not in _uploaded(sdk_parties, 1)


def test_bad_sample_count(sdk_parties):
    with sdk_parties.client("a2") as c:
        with pytest.raises(ValueError, match="n_samples"):
            c.submit(1, np.ones(M), 0)


def test_wrong_round_unregistered_and_unknown_client(sdk_parties):
    with sdk_parties.client("a2") as c:
        with pytest.raises(BadRoundError, match="round 5 is not open"):
            c.submit(5, np.ones(M), 1)
    with sdk_parties.client("a4") as c:  # known to the parties but never registered
        with pytest.raises(NotRegisteredError, match="not registered"):
            c.submit(1, np.ones(M), 1)
    stranger = Client("zed", "nope", sdk_parties.address(0), sdk_parties.address(1), sdk_parties.ca_cert)
    with pytest.raises(AuthenticationError, match="unknown client 'zed'"):
        stranger.register()
    stranger.close()


def test_unreachable_party_is_named(sdk_parties):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    c = Client(
        "a0",
        sdk_parties.creds["clients"]["a0"],
        sdk_parties.address(0),
        dead,
        sdk_parties.ca_cert,
        retries=2,
        backoff_s=0.05,
        timeout_s=2,
    )
    with pytest.raises(PartyUnreachableError, match="party1"):
        c.fetch_model()
    c.close()


@pytest.mark.parametrize("cid, serving", [("a0", 1), ("a4", 0)])
def test_model_served_differently_by_the_parties_is_refused(sdk_parties, sdk_twin, cid, serving):
    """The body comes from the client's model party (spread by client id), the header from the
    other; a twin party1 holding another M_0 is caught either way."""
    creds = sdk_parties.creds["clients"][cid]
    c = Client(cid, creds, sdk_parties.address(0), sdk_twin.address(1), sdk_parties.ca_cert)
    assert c.model_party == serving
    served = {0: model_hash("toy", np.zeros(M, dtype=np.float32)), 1: model_hash("toy", np.ones(M, dtype=np.float32))}
    with pytest.raises(ModelMismatchError, match=f"party{serving} serves model {served[serving][:12]}.*refusing"):
        c.fetch_model(0)
    c.close()


def test_model_downloads_are_spread_over_the_parties(sdk_parties):
    """Each party's uplink serves about half the clients; either way the client gets M_0."""
    assert 80 <= sum(model_party(f"client-{i:03d}") for i in range(200)) <= 120
    for cid in ("a0", "a4"):
        creds = sdk_parties.creds["clients"][cid]
        with Client(cid, creds, sdk_parties.address(0), sdk_parties.address(1), sdk_parties.ca_cert) as c:
            model = c.fetch_model(0)
        assert model.round == 0 and np.array_equal(model.params, np.zeros(M, dtype=np.float32))


def test_sdk_imports_without_torch(tmp_path):
    import subprocess
    import sys

    code = "import sys; sys.modules['torch'] = None; import client_sdk; from client_sdk import Client; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "ok", out.stderr
