"""Round selection (SecRS Method 1/2, SecRS(alt)) equals plaintext cosine-similarity top-T′."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mpc.plain_backend import PlainBackend
from unlearning.history import InMemoryHistory, RoundInfo
from unlearning.starfish.secrs import select_rounds

CLIENTS = ("t0", "t1", "r0", "r1")


def selection_history(
    backend: PlainBackend, seed: int, rounds: int, m: int = 7, absent: dict[str, set[int]] | None = None
) -> InMemoryHistory:
    """Random FedAvg-consistent history: M_i = M_{i−1} − η·Σ_j w_j g_i^j, norms as reported."""
    gen = torch.Generator().manual_seed(seed)
    lr = 0.1
    absent = absent or {}
    models = [torch.randn(m, generator=gen, dtype=torch.float64).float()]
    infos, grads, norms, deltas = [], {}, {}, {}
    for i in range(1, rounds + 1):
        members = tuple(c for c in CLIENTS if i not in absent.get(c, set()))
        n_samples = {c: 10 + 3 * k for k, c in enumerate(members)}
        total = sum(n_samples.values())
        agg = torch.zeros(m, dtype=torch.float64)
        for c in members:
            g = torch.randn(m, generator=gen, dtype=torch.float64)
            grads[(i, c)] = backend.share(g)
            norms[(i, c)] = backend.share(g.norm().reshape(()))
            deltas[(i, c)] = backend.share(g.abs().max().reshape(()))
            agg += n_samples[c] / total * g
        models.append((models[-1].double() - lr * agg).float())
        infos.append(RoundInfo(index=i, clients=members, n_samples=n_samples, lr=lr))
    return InMemoryHistory(models=models, infos=infos, grads=grads, grad_norms=norms, deltas=deltas)


def plaintext_top(history: InMemoryHistory, backend: PlainBackend, targets: list[str], count: int) -> list[int]:
    """Reference: rank rounds by cos(Σ_t n_t g_i^t, M_{i−1} − M_i) (0 if no target), best first."""
    scores = []
    for i in range(1, history.num_rounds + 1):
        info = history.round_info(i)
        present = [t for t in targets if t in info.clients]
        step = history.model(i - 1).double() - history.model(i).double()
        if not present:
            scores.append(0.0)
            continue
        g = sum(info.n_samples[t] * backend.reveal(history.gradients(backend, i, [t]))[0] for t in present)
        scores.append(float(g @ step / (g.norm() * step.norm())))
    order = sorted(range(len(scores)), key=lambda k: -scores[k])
    return [k + 1 for k in order[:count]]


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 100_000), rounds=st.integers(2, 13), sigma=st.floats(0.1, 1.0))
def test_all_methods_equal_plaintext_cosine_top(seed: int, rounds: int, sigma: float) -> None:
    backend = PlainBackend()
    history = selection_history(backend, seed, rounds)
    count = math.ceil(sigma * rounds)
    want = plaintext_top(history, backend, ["t0"], count)
    for comparison, alt in (("method1", False), ("method2", False), ("method1", True), ("method2", True)):
        got = select_rounds(backend, history, ["t0"], count, comparison, alt)
        assert got.rounds == tuple(sorted(want)), (comparison, alt)  # the set, never the rank order
        assert got.method == (f"alt-{comparison}" if alt else comparison)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 100_000), rounds=st.integers(3, 10))
def test_several_targets_rank_by_combined_upload(seed: int, rounds: int) -> None:
    backend = PlainBackend()
    history = selection_history(backend, seed, rounds, absent={"t1": {1}})
    count = max(1, rounds // 2)
    want = plaintext_top(history, backend, ["t0", "t1"], count)
    for comparison in ("method1", "method2"):
        got = select_rounds(backend, history, ["t0", "t1"], count, comparison, alt=False)
        assert got.rounds == tuple(sorted(want))
        assert got.method == f"alt-{comparison}"


def test_round_without_target_scores_zero() -> None:
    """Rounds the target skipped score exactly 0: they rank between its positive and negative rounds."""
    backend = PlainBackend()
    history = selection_history(backend, 6, 6, absent={"t0": {2, 4}})
    scores = {}
    for i in (1, 3, 5, 6):
        g = backend.reveal(history.gradients(backend, i, ["t0"]))[0]
        step = history.model(i - 1).double() - history.model(i).double()
        scores[i] = float(g @ step / (g.norm() * step.norm()))
    scores[2] = scores[4] = 0.0
    positive = {i for i, v in scores.items() if v > 0}
    assert positive and len(positive) < 4  # some rounds score above 0, some below
    above_zero = select_rounds(backend, history, ["t0"], len(positive), "method1", alt=False)
    with_zero = select_rounds(backend, history, ["t0"], len(positive) + 2, "method1", alt=False)
    assert above_zero.rounds == tuple(sorted(positive))
    assert with_zero.rounds == tuple(sorted(positive | {2, 4}))


def aligned_history(backend: PlainBackend, aligned: set[int], rounds: int = 8, m: int = 6) -> InMemoryHistory:
    """The target pushes along the descent direction (g ∥ G_agg) in `aligned` rounds, against it elsewhere."""
    gen = torch.Generator().manual_seed(11)
    lr = 0.2
    models = [torch.zeros(m)]
    infos, grads, norms, deltas = [], {}, {}, {}
    for i in range(1, rounds + 1):
        base = torch.randn(m, generator=gen, dtype=torch.float64)
        noise = 0.1 * torch.randn(m, generator=gen, dtype=torch.float64)
        g_target = (base if i in aligned else -0.3 * base) + noise
        g_other = 3.0 * base
        n_samples = {"t0": 10, "r0": 30}
        agg = 0.25 * g_target + 0.75 * g_other
        for c, g in (("t0", g_target), ("r0", g_other)):
            grads[(i, c)] = backend.share(g)
            norms[(i, c)] = backend.share(g.norm().reshape(()))
            deltas[(i, c)] = backend.share(g.abs().max().reshape(()))
        models.append((models[-1].double() - lr * agg).float())
        infos.append(RoundInfo(index=i, clients=("t0", "r0"), n_samples=n_samples, lr=lr))
    return InMemoryHistory(models=models, infos=infos, grads=grads, grad_norms=norms, deltas=deltas)


@pytest.mark.parametrize("comparison,alt", [("method1", False), ("method2", False), ("method1", True)])
def test_sign_pitfall_selects_rounds_the_target_pushed(comparison: str, alt: bool) -> None:
    """⟨g, M_{i−1} − M_i⟩, not the literal ⟨g, M_i − M_{i−1}⟩ (which would pick the other rounds)."""
    backend = PlainBackend()
    aligned = {2, 3, 5, 8}
    history = aligned_history(backend, aligned)
    got = select_rounds(backend, history, ["t0"], len(aligned), comparison, alt)
    assert set(got.rounds) == aligned
    literal = []
    for i in range(1, 9):
        g = backend.reveal(history.gradients(backend, i, ["t0"]))[0]
        step = history.model(i).double() - history.model(i - 1).double()
        literal.append(float(g @ step / (g.norm() * step.norm())))
    literal_top = {k + 1 for k in sorted(range(8), key=lambda k: -literal[k])[: len(aligned)]}
    assert literal_top.isdisjoint(aligned)


@pytest.mark.parametrize(
    "comparison,alt", [("method1", False), ("method2", False), ("method1", True), ("method2", True)]
)
def test_null_global_step_scores_zero(comparison: str, alt: bool) -> None:
    """A round with M_i = M_{i−1} has no direction: it scores 0 on every path (no division by 0)."""
    backend = PlainBackend()
    history = selection_history(backend, 6, 6)
    history.models[3] = history.models[2].clone()  # round 3 moved nothing
    positive = set()
    for i in (1, 2, 4, 5, 6):
        g = backend.reveal(history.gradients(backend, i, ["t0"]))[0]
        if float(g @ (history.model(i - 1).double() - history.model(i).double())) > 0:
            positive.add(i)
    assert 0 < len(positive) < 5
    above_zero = select_rounds(backend, history, ["t0"], len(positive), comparison, alt)
    with_null = select_rounds(backend, history, ["t0"], len(positive) + 1, comparison, alt)
    assert above_zero.rounds == tuple(sorted(positive))
    assert with_null.rounds == tuple(sorted(positive | {3}))  # the null round sits at score 0
