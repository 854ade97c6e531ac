"""The L-BFGS compact form of kept pairs under real 2PC (dealer + two party processes on
127.0.0.1). A pair whose curvature ŝᵀŷ lay below the fixed-point grid passed the safeguard
(ε = 10⁻⁶), made K singular in fixed point and SecMI failed on it; the safeguard now refuses
it (`CURVATURE_FLOOR`), and every kept buffer's D·K⁻¹ matches the plaintext backend within
the first-order bound for K's entries off by one ulp each, however small the curvatures."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from mpc.backend import Backend
from mpc.cluster import TwoPartyCluster
from mpc.fixedpoint import DEFAULT_PRECISION_BITS
from mpc.plain_backend import PlainBackend
from unlearning.lbfgs import CURVATURE_FLOOR, compact_form, curvature_accepted, gram, local_dots, middle_matrix

ULP = 2.0**-DEFAULT_PRECISION_BITS
EPS, KAPPA = 1e-6, 1e3  #: the default curvature safeguard
TWO_PARTY = settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
#: log₂(c/CURVATURE_FLOOR) of a pair's curvature c, away from the floor itself (5 %)
EXPONENT = st.floats(-8.0, 6.0).filter(lambda e: abs(e) > math.log2(1.05))
KEPT = st.floats(math.log2(1.05), 6.0)  #: the exponent of a kept pair's curvature


def pairs(seed: int, exponents: tuple[float, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """One client's pairs: unit ŝ_i (k, m) and small ŷ_i (‖ŷ‖ ≈ 5·10⁻³, so ‖ŷ‖² ≤ κ·c_i)
    with curvature ŝ_iᵀŷ_i = c_i = CURVATURE_FLOOR·2^(e_i)."""
    gen = torch.Generator().manual_seed(seed)
    k, m = len(exponents), 6
    s = torch.nn.functional.normalize(torch.randn(k, m, generator=gen, dtype=torch.float64), dim=1)
    y = torch.randn(k, m, generator=gen, dtype=torch.float64) * 2e-3
    for i, e in enumerate(exponents):
        y[i] += (CURVATURE_FLOOR * 2.0**e - float(s[i] @ y[i])) * s[i]
    return s, y


def curvature_bits(backend: Backend, rank: int, s: torch.Tensor, y: torch.Tensor) -> list[bool]:
    """The safeguard's revealed bit for each pair (s_i, y_i)."""
    y_shared = backend.share(y, src=0)
    rows = [backend.index(y_shared, slice(i, i + 1)) for i in range(s.shape[0])]
    return [bool(curvature_accepted(backend, s[i], row, EPS, KAPPA)[0][0]) for i, row in enumerate(rows)]


def inverse_form(backend: Backend, rank: int, s: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """D·K⁻¹ (2k, 2k) of the client's buffer by SecMI (`compact_form`), revealed."""
    ys = backend.share(y[None], src=0)
    return backend.reveal(compact_form(backend, s[None], ys, gram(backend, ys), "secmi").dkinv)[0]


def inverse_bound(s: torch.Tensor, y: torch.Tensor) -> float:
    """‖Δ(D·K⁻¹)‖₂ for K's entries off by one ulp each (‖ΔK‖₂ ≤ δ = 2k·ulp) and σ_k by one:
    max(σ, 1)·‖K⁻¹‖²δ/(1 − ‖K⁻¹‖δ) + ulp·‖K⁻¹‖ (first-order perturbation of an inverse)."""
    plain = PlainBackend()
    a = local_dots(plain, plain.share(y[None]), [s.reshape(len(s), 1, -1)])
    kmat, sigma = middle_matrix(plain, (s @ s.T)[None], a)
    inv_norm = float(torch.linalg.matrix_norm(torch.linalg.inv(plain.reveal(kmat)[0]), ord=2))
    delta = 2 * len(s) * ULP
    assert inv_norm * delta < 1.0
    scale = max(float(plain.reveal(sigma)[0]), 1.0)
    return scale * inv_norm**2 * delta / (1.0 - inv_norm * delta) + ULP * inv_norm


@pytest.fixture(scope="module")
def cluster():
    with TwoPartyCluster(timeout=120) as running:
        yield running


@pytest.mark.timeout(300)
@TWO_PARTY
@given(seed=st.integers(0, 2**16), older=EXPONENT, newest=EXPONENT)
@example(seed=0, older=4.0, newest=math.log2(5e-6 / CURVATURE_FLOOR))  # passed ε = 1e-6; K̄ was singular
def test_a_pair_is_kept_only_above_the_curvature_floor(
    cluster: TwoPartyCluster, seed: int, older: float, newest: float
) -> None:
    s, y = pairs(seed, (older, newest))
    got, other = cluster.run(curvature_bits, s, y)
    assert got == other == curvature_bits(PlainBackend(), 0, s, y) == [older > 0, newest > 0]


@pytest.mark.timeout(300)
@TWO_PARTY
@given(seed=st.integers(0, 2**16), older=KEPT, newest=KEPT)
@example(seed=1, older=4.0, newest=0.1)  # just above the floor: SecMI's N is too coarse to refine from
def test_a_kept_buffer_inverts_under_2pc(cluster: TwoPartyCluster, seed: int, older: float, newest: float) -> None:
    s, y = pairs(seed, (older, newest))
    got, other = cluster.run(inverse_form, s, y)
    assert torch.equal(got, other)
    err = float(torch.linalg.matrix_norm(got - inverse_form(PlainBackend(), 0, s, y), ord=2))
    assert err <= inverse_bound(s, y), (err, inverse_bound(s, y))
