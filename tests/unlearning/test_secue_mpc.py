"""SecUE under real 2PC (dealer + two party processes on 127.0.0.1).

The summed update (`secue.estimate_update`) equals the weighted sum of the plaintext
backend's per-client estimates, and its fixed-operand product costs the dealer m ring
elements where the per-client estimates' cost n·m. A pair entry (`secue.add_pairs`) takes
‖y‖² from fixed operands (no n·m square pair) and, when the step is long, opens the rows once."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from test_secue import CLIENTS, M, PairState, fill, uneven_buffers

from mpc.backend import Backend
from mpc.cluster import TwoPartyCluster
from mpc.plain_backend import PlainBackend
from unlearning.starfish.params import StarfishParams
from unlearning.starfish.secue import add_pairs, estimate_gradients, estimate_update, round_terms

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


ENTRY_M, ENTRY_N = 4096, 3


def pair_entry(backend: Backend, rank: int = 0) -> dict[str, Any]:
    """The same normalised pairs offered with a step of norm 3 and of norm 0.3: the bits, the
    kept ŷ and ‖ŷ‖², and each entry's online and offline bytes."""
    gen = torch.Generator().manual_seed(5)
    direction = torch.nn.functional.normalize(torch.randn(ENTRY_M, generator=gen, dtype=torch.float64), dim=0)
    noise = torch.randn(ENTRY_N, ENTRY_M, generator=gen, dtype=torch.float64) / ENTRY_M**0.5
    # curvatures 0.5 and 1.5 pass; the last row's (−0.5) fails the test
    slopes = torch.tensor([0.5, 1.5, -0.5], dtype=torch.float64)
    names = [f"c{j}" for j in range(ENTRY_N)]
    out: dict[str, Any] = {}
    with backend.own_ledger() as ledger:
        for label, norm in (("long", 3.0), ("short", 0.3)):
            store = PairState()
            s = norm * direction
            exact = backend.share(norm * (slopes[:, None] * direction + 0.1 * noise), src=0)
            with backend.step(label):
                add_pairs(backend, store, names, 1, s, exact, backend.zeros((ENTRY_N, ENTRY_M)), PARAMS)
            pairs = [store.buffers[c][0] for c in names if c in store.buffers]
            out[label] = {
                "bits": [e.accepted for e in store.log.curvature],
                "y": [p.scale * backend.reveal(p.y) for p in pairs],  # ŷ: the held rows times their scale
                "yy": [backend.reveal(p.yy) for p in pairs],
            }
    for label, cost in ledger.to_dict().items():
        out[label].update(online=cost["online_bytes"], offline=cost["offline_bytes"])
    return out


@pytest.mark.timeout(180)
def test_a_pair_entry_opens_its_rows_once_whatever_the_step(cluster: TwoPartyCluster) -> None:
    """‖s‖ ≥ 1: the rows are normalised and fixed; ‖s‖ < 1: the raw rows are fixed and held
    with the scale 1/‖s‖. Either way one opening, and ‖ŷ‖² is a dealer scalar per row (no
    n·m square pair). Both keep the same pairs, with the plaintext backend's ŷ and ‖ŷ‖²
    within fixed-point error."""
    plain = pair_entry(PlainBackend())
    got, _ = cluster.run(pair_entry)
    for label in ("long", "short"):
        assert got[label]["bits"] == plain[label]["bits"] == [True, True, False]
        pairs = got[label]["y"] + got[label]["yy"], plain[label]["y"] + plain[label]["yy"]
        for secure, exact in zip(*pairs, strict=True):
            assert float((secure - exact).abs().max()) < 1e-3
        # the dealer's share of a square pair would be n·m ring elements
        assert got[label]["offline"] < 8 * ENTRY_N * ENTRY_M // 2, got[label]["offline"]
        # one opening of the offered rows (m int64 each way per row) and the test's few scalars
        assert 2 * 8 * ENTRY_N * ENTRY_M <= got[label]["online"] < 2 * 8 * (ENTRY_N + 1) * ENTRY_M


def round_counts(backend: Backend, rank: int = 0) -> dict[str, int]:
    """Online rounds of `round_terms` for clients in two buffer-length groups and in one, and
    of one comparison (safeguard 2's `ge`) on its own."""
    store = PairState()
    fill(backend, store, PARAMS, 1, seed=11)  # type: ignore[arg-type]
    uneven_buffers(backend, store, PARAMS, 11, [True, False, True])  # type: ignore[arg-type]  # c0, c2: 2 pairs
    gen = torch.Generator().manual_seed(12)
    g = backend.share(torch.randn(CLIENTS + 1, M, generator=gen, dtype=torch.float64) * 0.1, src=0)
    v = torch.randn(M, generator=gen, dtype=torch.float64) * 0.2
    two, one = ["c0", "c1", "c2", "c3"], ["c0", "c2", "c3"]
    for names in (two, one):  # builds the cached compact forms (SecMI) outside the ledger
        round_terms(backend, store, names, backend.index(g, slice(0, len(names))), v, PARAMS)
    with backend.own_ledger() as ledger:
        for label, names in (("two", two), ("one", one)):
            with backend.step(label):
                terms = round_terms(backend, store, names, backend.index(g, slice(0, len(names))), v, PARAMS)
                assert len(terms) == (2 if names is two else 1)
        with backend.step("compare"):
            backend.ge(backend.index(g, (slice(None), 0)), backend.index(g, (slice(None), 1)))
    return {label: cost["online_rounds"] for label, cost in ledger.to_dict().items()}


@pytest.mark.timeout(180)
def test_a_round_compares_every_group_at_once(cluster: TwoPartyCluster) -> None:
    """Safeguard 2 runs one comparison for all buffer-length groups: a second group adds its
    small products' rounds, not another comparison's."""
    got, other = cluster.run(round_counts)
    assert got == other
    assert got["two"] - got["one"] < got["compare"], got
