"""SecUE's summed update (`secue.estimate_update`) under real 2PC (dealer + two party
processes on 127.0.0.1): it equals the weighted sum of the per-client estimates of the
plaintext backend, and its fixed-operand product costs the dealer m ring elements where the
per-client estimates' costs n·m."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from test_secue import CLIENTS, M, PairState, fill, uneven_buffers

from mpc.backend import Backend
from mpc.cluster import TwoPartyCluster
from mpc.plain_backend import PlainBackend
from unlearning.starfish.params import StarfishParams
from unlearning.starfish.secue import estimate_gradients, estimate_update

WEIGHTS = [0.05, 0.3, 0.02, 0.1]  #: η·FedAvg weights of the CLIENTS + 1 clients (c3 holds no pair)
PARAMS = StarfishParams(buffer_size=2, hv_bound=1e6)


def estimates(backend: Backend, rank: int = 0) -> dict[str, Any]:
    """Per-client estimates and the summed update on the same buffers, each with its offline bytes."""
    store = PairState()
    fill(backend, store, PARAMS, 1, seed=11)  # type: ignore[arg-type]
    uneven_buffers(backend, store, PARAMS, 11, [True, False, True])  # type: ignore[arg-type]  # c0, c2: 2 pairs
    names = [f"c{j}" for j in range(CLIENTS + 1)]
    gen = torch.Generator().manual_seed(12)
    g = backend.share(torch.randn(CLIENTS + 1, M, generator=gen, dtype=torch.float64) * 0.1, src=0)
    v = torch.randn(M, generator=gen, dtype=torch.float64) * 0.2
    estimate_gradients(backend, store, names, g, v, PARAMS)  # builds the cached compact forms (SecMI)
    with backend.own_ledger() as ledger:
        with backend.step("rows"):
            rows = backend.reveal(estimate_gradients(backend, store, names, g, v, PARAMS))
        with backend.step("sum"):
            update = backend.reveal(estimate_update(backend, store, names, g, v, PARAMS, WEIGHTS))
    costs = ledger.to_dict()
    return {
        "rows": rows,
        "buffers": [len(store.buffers.get(name, [])) for name in names],
        "update": update,
        "rows_offline": costs["rows"]["offline_bytes"],
        "sum_offline": costs["sum"]["offline_bytes"],
    }


@pytest.fixture(scope="module")
def cluster():
    with TwoPartyCluster(timeout=120) as running:
        yield running


@pytest.mark.timeout(180)
def test_the_summed_update_matches_plaintext_and_costs_m_from_the_dealer(cluster: TwoPartyCluster) -> None:
    plain = estimates(PlainBackend())
    expected = torch.tensor(WEIGHTS, dtype=torch.float64) @ plain["rows"]
    torch.testing.assert_close(plain["update"], expected)
    got, other = cluster.run(estimates)
    assert torch.equal(got["update"], other["update"])
    gap = float((got["update"] - expected).norm() / expected.norm())
    assert gap <= 1e-3, gap
    assert plain["buffers"] == got["buffers"] == [2, 1, 2, 0]
    # two groups with pairs (k = 2: c0, c2; k = 1: c1): party 0 fetches C = A·B's share of each
    # product from the dealer, 3·m ring elements for the per-client estimates, one m per group
    # (2·m) for the summed update; the rest of the two calls is the same
    assert got["sum_offline"] == got["rows_offline"] - 8 * M, (got["sum_offline"], got["rows_offline"])
