"""The unencrypted measurement transports ("tcp", "gloo") compute exactly what the TLS
plane computes, so the plane benchmark compares like with like."""

from __future__ import annotations

import pytest
import torch

from mpc.cluster import ClusterConfig, run_two_party

from helpers import twoparty_cases as cases


@pytest.mark.timeout(400)
def test_measurement_transports_agree_with_the_tls_plane():
    gen = torch.Generator().manual_seed(5)
    x, y = (torch.randn(6, generator=gen, dtype=torch.float64) for _ in range(2))
    w = torch.randn(6, 3, generator=gen, dtype=torch.float64)
    out = {}
    for transport in ("tls", "tcp", "gloo"):
        r0, r1 = run_two_party(cases.arithmetic, (x, y, w), timeout=180, config=ClusterConfig(transport=transport))
        assert all(torch.equal(r0[k], r1[k]) for k in r0)
        assert torch.allclose(r0["mul"], x * y, atol=1e-3)
        out[transport] = r0
    for k in out["tls"]:  # the same fixed-point results up to the truncation's last-bit noise
        assert torch.allclose(out["tcp"][k], out["tls"][k], atol=1e-3)
        assert torch.allclose(out["gloo"][k], out["tls"][k], atol=1e-3)
