"""Session safety: TFP refused, remote rendezvous refused, lock-step detection, dead/hung peers."""

from __future__ import annotations

import re

import pytest
import torch

import twoparty_cases as cases
from mpc.cluster import ClusterConfig, TwoPartyError, run_two_party
from mpc.session import InsecureProviderError, SessionConfig, SessionError, configure

SHORT_TIMEOUT_S = 5.0


def test_tfp_provider_is_refused():
    with pytest.raises(InsecureProviderError, match="TFP"):
        SessionConfig(rank=0, port=29500, provider="TFP")
    # only an explicit test-only switch lets it through
    assert SessionConfig(rank=0, port=29500, provider="TFP", allow_tfp=True).provider == "TFP"


def test_configure_sets_ttp_provider():
    from mpc.onnx_shim import load_crypten

    crypten = load_crypten()
    configure(SessionConfig(rank=0, port=29501))
    assert crypten.cfg.mpc.provider == "TTP"


def test_remote_rendezvous_needs_explicit_flag():
    with pytest.raises(SessionError, match="loopback"):
        SessionConfig(rank=1, port=29500, host="10.1.2.3")
    assert SessionConfig(rank=1, port=29500, host="10.1.2.3", allow_remote=True).host == "10.1.2.3"


@pytest.mark.parametrize("bad", [dict(rank=3), dict(port=0), dict(timeout_s=0.0), dict(provider="HE")])
def test_bad_session_config_rejected(bad):
    args = dict(rank=0, port=29500) | bad
    with pytest.raises(SessionError):
        SessionConfig(**args)


def test_parties_out_of_step_raise_on_both_sides(cluster):
    r0, r1 = cluster.run(cases.out_of_step, torch.ones(4, dtype=torch.float64))
    assert r0.startswith("OutOfStepError") and r1.startswith("OutOfStepError")
    assert "out of step" in r0


def test_different_step_names_detected(cluster):
    r0, r1 = cluster.run(cases.step_mismatch)
    assert r0.startswith("OutOfStepError") and r1.startswith("OutOfStepError")


def test_cluster_still_usable_after_detected_mismatch(cluster):
    cluster.run(cases.out_of_step, torch.ones(2, dtype=torch.float64))
    got, _ = cluster.run(cases.maximum, torch.tensor([[1.0, 3.0], [2.0, -1.0]], dtype=torch.float64), 0)
    assert got.tolist() == [2.0, 3.0]


@pytest.mark.timeout(120)
def test_hung_peer_raises_within_timeout():
    config = ClusterConfig(session_timeout_s=SHORT_TIMEOUT_S)
    with pytest.raises(TwoPartyError) as info:
        run_two_party(cases.hang_then_reveal, (20 * SHORT_TIMEOUT_S,), timeout=90, config=config)
    assert 0 in info.value.errors, info.value
    waited = _waited_seconds(info.value.errors[0])
    # party 0 gave up after the configured timeout (not gloo's 30 minutes, not the 100 s hang)
    assert SHORT_TIMEOUT_S - 0.5 <= waited <= SHORT_TIMEOUT_S + 3.0, info.value.errors[0]


@pytest.mark.timeout(120)
def test_dead_peer_raises_promptly():
    config = ClusterConfig(session_timeout_s=60.0)
    with pytest.raises(TwoPartyError) as info:
        run_two_party(cases.die_then_mul, (), timeout=90, config=config)
    assert 0 in info.value.errors and 1 in info.value.errors
    assert "exited with code 3" in info.value.errors[1]
    assert _waited_seconds(info.value.errors[0]) < 2.0  # "connection closed", not the 60 s timeout


def _waited_seconds(traceback_text: str) -> float:
    match = re.search(r"peer wait failed after ([0-9.]+) s", traceback_text)
    assert match, traceback_text
    return float(match.group(1))


@pytest.mark.timeout(240)
def test_sessions_reinitialise_in_the_same_processes():
    import multiprocessing as mp

    from mpc.cluster import free_port

    ctx = mp.get_context("spawn")
    ports = [free_port(), free_port()]
    out = ctx.Queue()
    procs = [ctx.Process(target=cases.reinit_dealer, args=(ports,))]
    procs += [ctx.Process(target=cases.reinit_party, args=(r, ports, out)) for r in (0, 1)]
    for p in procs:
        p.start()
    try:
        got = dict(out.get(timeout=200) for _ in range(2))
        for p in procs:
            p.join(60)
        assert got[0] == got[1] == [[2.25, 4.0], [2.25, 4.0]]
        assert all(p.exitcode == 0 for p in procs)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
