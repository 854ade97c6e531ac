"""Every protocol in a real 2-party + dealer setting (three processes) vs the plaintext backend.

Inputs lie on the fixed-point grid (multiples of 2^-16) within the documented ranges
(docs/NUMERICS.md), including negatives, tiny and large values. Comparisons, sort orders,
selections, maxima and flags must match the plaintext backend EXACTLY; arithmetic within
the documented tolerance.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from mpc.dp_noise import keyed_gaussian
from mpc.fixedpoint import DEFAULT_PRECISION_BITS, encode, share
from mpc.plain_backend import PlainBackend

from helpers import twoparty_cases as cases

pytestmark = pytest.mark.timeout(600)

F = DEFAULT_PRECISION_BITS
ULP = 2.0**-F
P = PlainBackend()
# each example is a real 2PC run (0.1–2 s); no shrinking (a failure restarts the cluster)
MPC_SETTINGS = settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)


def grid(lo_exp: int, hi_exp: int, positive: bool = False) -> st.SearchStrategy[float]:
    """Grid values with magnitudes spread over [2^lo_exp, 2^hi_exp] (tiny to large), signed."""
    mag = st.builds(
        lambda e, m: max(1, int(m * 2.0 ** (e + F))) * ULP, st.integers(lo_exp, hi_exp - 1), st.floats(1.0, 2.0)
    )
    if positive:
        return mag
    return st.one_of(st.just(0.0), mag, mag.map(lambda v: -v))


def vec(strategy: st.SearchStrategy[float], n: int) -> st.SearchStrategy[torch.Tensor]:
    return st.lists(strategy, min_size=n, max_size=n).map(lambda xs: torch.tensor(xs, dtype=torch.float64))


def sh(x: torch.Tensor):
    return P.share(x)


@MPC_SETTINGS
@given(
    st.integers(1, 12).flatmap(
        lambda n: st.tuples(
            vec(grid(-10, 3), n), vec(grid(-10, 3), n), vec(grid(-6, 2), 3 * n).map(lambda t: t.reshape(n, 3))
        )
    )
)
def test_arithmetic_within_tolerance(cluster, xyw):
    x, y, w = xyw
    got, _ = cluster.run(cases.arithmetic, x, y, w)
    ref = {
        "add": x + y,
        "sub": x - y,
        "neg": -x,
        "mul": x * y,
        "square": x * x,
        "mul_public": x * w[:, 0],
        "add_public": x + w[:, 1],
        "matmul_public": x @ w,
        "public_matmul": w.T @ y,
        "outer": torch.outer(x, y),
        "sum": x.sum(),
        "dot": x @ y,
        "mul3": x * y * w[:, 2],
    }
    # linear ops are exact on the grid (w is a grid value too); one local truncation of a
    # product is off by < 2 ulp (each party truncates its share: two errors < 1 ulp each);
    # SecMul3 truncates twice, the first error scaled by |w|
    exact = {"add", "sub", "neg", "sum", "add_public"}
    for key, expected in ref.items():
        if key in exact:
            bound = 0.0
        elif key == "mul3":
            bound = 2 * ULP * (1 + float(w[:, 2].abs().max()))
        else:
            bound = 2 * ULP
        err = float((got[key] - expected).abs().max())
        assert err <= bound if bound == 0.0 else err < bound, (key, err / ULP)
    # a prepared public operand gives bit-for-bit the product of the unprepared one
    for prepared, plain in (
        ("mul_prepared", "mul_public"),
        ("matmul_prepared", "matmul_public"),
        ("prepared_matmul", "public_matmul"),
        ("dot_prepared", "dot_public"),
    ):
        assert torch.equal(got[prepared], got[plain]), prepared


@MPC_SETTINGS
@given(
    st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 40), st.integers(1, 2), st.integers(2, 3)).flatmap(
        lambda d: st.tuples(
            st.just(d),
            vec(grid(-10, 3), d[0] * d[1] * d[2]),
            st.lists(vec(grid(-10, 3), d[0] * d[3] * d[1]), min_size=d[4], max_size=d[4]),
        )
    )
)
def test_fixed_operand_products_match_plaintext(cluster, data):
    """One fixing, several products with fresh factors: each within the tolerance of one product."""
    (n, k, m, r, _), flat, xs_flat = data
    rows = flat.reshape(n * k, m)  # n·k fixed operands of shape (m,)
    xs = [x.reshape(n, r, k) for x in xs_flat]
    got, other = cluster.run(cases.fixed_products, rows, xs, (n, k, m))
    y = rows.reshape(n, k, m)
    for product, x in zip(got["products"], xs, strict=True):
        expected = P.reveal(P.fixed_matmul(sh(x), P.fix([sh(row) for row in rows]), (n, k, m)))
        assert torch.equal(expected, x @ y)
        # one truncation of the sum of k products: < 2 ulp, like any matmul
        err = float((product - expected).abs().max())
        assert err < 2 * ULP, err / ULP
        rel = float((product - expected).norm() / max(float(expected.norm()), ULP))
        assert rel < 1e-3 or err < 2 * ULP
    assert float((got["single"] - xs[0][..., :1, :1] * rows[0]).abs().max()) < 2 * ULP
    # both parties number their fixed operands alike, counting on within the session
    assert got["numbers"] == other["numbers"]
    assert got["numbers"][-1] == got["numbers"][-2] + 1 and got["current"] and other["current"]
    # a product opens only the small factor: n·r·k int64 sent and received (plus the 8-byte
    # lock-step digest each way), and party 0 fetches C's share, n·r·m int64
    assert got["cost"]["online_bytes"] == 2 * 8 + 2 * 8 * n * r * k
    assert got["cost"]["online_rounds"] == 2
    assert got["cost"]["offline_bytes"] == 8 * n * r * m
    # scalar products of fixed operands: < 2 ulp (one truncation each), nothing opened (only
    # the lock-step digest crosses), one int64 per product from the dealer
    count = n * k
    order = list(range(count))
    firsts, seconds = rows[order + order + [0]], rows[order + order[1:] + order[:1] + [0]]
    expected_dots = (firsts * seconds).sum(1)
    assert torch.equal(
        P.reveal(P.fixed_dot(P.fix(list(map(sh, firsts))), P.fix(list(map(sh, seconds))))), expected_dots
    )
    assert float((got["dots"] - expected_dots).abs().max()) < 2 * ULP
    assert got["dots_cost"]["online_bytes"] == 2 * 8 and got["dots_cost"]["offline_bytes"] == 8 * (2 * count + 1)


@MPC_SETTINGS
@given(
    st.integers(1, 16).flatmap(
        lambda n: st.tuples(
            vec(grid(-12, 6), n),
            vec(grid(-12, 6), n),
            vec(grid(-8, 4), n),
            vec(grid(-8, 4, True), n),
            vec(grid(-8, 4), n),
            vec(grid(-8, 4, True), n),
        )
    )
)
def test_comparisons_and_selection_exact(cluster, data):
    a, b, ui, vi, uj, vj = data
    # SecGE3's b = u²/v on the grid (w carries the sign)
    bi, bj = (torch.round(ui * ui / vi / ULP) * ULP), (torch.round(uj * uj / vj / ULP) * ULP)
    got, other = cluster.run(cases.compare, a, b, torch.stack([ui, vi, bi], 1), torch.stack([uj, vj, bj], 1))
    for key in got:
        assert torch.equal(got[key], other[key]), f"parties disagree on {key}"
    assert torch.equal(got["ge"], P.reveal(P.ge(sh(a), sh(b))))
    assert torch.equal(got["ge_public"], (a >= 0.25).double())
    assert torch.equal(got["ge2"], P.reveal(P.ge2(sh(ui), sh(vi), sh(uj), sh(vj))))
    wi, wj = (ui >= 0).double(), (uj >= 0).double()
    assert torch.equal(got["ge3"], P.reveal(P.ge3(sh(wi), sh(bi), sh(wj), sh(bj))))
    # SecGE4 compares the revealed MPC squares exactly like the plaintext protocol would
    ai, aj = got["ai"], got["aj"]
    assert torch.equal(got["ge4"], P.reveal(P.ge4(sh(wi), sh(ai), sh(vi), sh(wj), sh(aj), sh(vj))))
    assert torch.equal(got["select"], torch.where(a >= b, a, b))
    assert torch.equal(got["select_public"], torch.where(a >= b, torch.full_like(a, 0.5), b))


SORT_SIZES = st.sampled_from([2, 3, 5, 8, 13, 16, 20])


@MPC_SETTINGS
@given(
    SORT_SIZES.flatmap(lambda n: st.tuples(vec(st.integers(-6, 6).map(lambda k: k * 0.125), n), vec(grid(-8, 8), n)))
)
def test_sort_ge_exact_with_ties(cluster, data):
    keys, extra = data
    payload = torch.stack([torch.arange(len(keys), dtype=torch.float64), extra], 1)
    sk, sp, _ = cluster.run(cases.sort, keys, payload, "ge")[0]
    pk, pp = P.sort_desc(sh(keys), sh(payload), "ge")
    assert torch.equal(sk, P.reveal(pk))
    assert torch.equal(sp, P.reveal(pp))  # ties broken identically; payload copied bit for bit


@MPC_SETTINGS
@given(SORT_SIZES.flatmap(lambda n: st.tuples(vec(grid(-10, 4), n), vec(grid(-8, 4, True), n))))
def test_sort_ge2_exact(cluster, data):
    u, v = data
    uv = torch.stack([u, v], 1)
    payload = torch.arange(len(u), dtype=torch.float64)
    sk, sp, cost = cluster.run(cases.sort, uv, payload, "ge2")[0]
    pk, pp = P.sort_desc(sh(uv), sh(payload), "ge2")
    assert torch.equal(sk, P.reveal(pk))
    assert torch.equal(sp, P.reveal(pp))
    assert cost["online_rounds"] > 0 and cost["calls"] == 1


@MPC_SETTINGS
@given(st.sampled_from([3, 8, 20, 40]).flatmap(lambda n: st.tuples(vec(grid(-10, 4), n), st.integers(1, n - 1))))
def test_top_set_equals_plaintext_in_fewer_rounds_than_a_sort(cluster, data):
    """SecRS's top T′ set under 2PC: the plaintext backend's rows (zero-score rows tie to the
    earlier ones), in fewer online rounds than the sorting network over the same keys."""
    u, k = data
    u[::3] = 0.0  # rounds without the target: u = 0, v = 1
    v = torch.where(u == 0, torch.ones_like(u), u.abs() + 0.5)
    uv = torch.stack([u, v], 1)
    chosen, top_cost, sort_cost = cluster.run(cases.top_set, uv, k, "ge2")[0]
    assert tuple(chosen) == P.top_set(sh(uv), k, "ge2")
    assert top_cost["online_rounds"] < sort_cost["online_rounds"]


@MPC_SETTINGS
@given(st.integers(1, 9), st.integers(1, 6), st.integers(0, 1), st.data())
def test_max_exact(cluster, rows, cols, dim, data):
    x = data.draw(vec(grid(-12, 10), rows * cols)).reshape(rows, cols)
    got, _ = cluster.run(cases.maximum, x, dim)
    assert torch.equal(got, x.max(dim).values)


@MPC_SETTINGS
@given(st.integers(1, 5), st.integers(1, 40), st.booleans(), st.data())
def test_threshold_flags_exact(cluster, n, m, use_sample, data):
    # gradients 1e-4..2, thresholds 1e-3..0.5: squares of the small ones underflow 2^-16,
    # the exact untruncated comparison must still decide them correctly
    g = data.draw(vec(grid(-13, 1), n * m)).reshape(n, m)
    delta = data.draw(vec(grid(-10, -1, True), n))
    sample = torch.tensor(data.draw(st.lists(st.integers(0, m - 1), min_size=1, max_size=m))) if use_sample else None
    flags, other = cluster.run(cases.threshold, g, delta, sample)
    assert torch.equal(flags, other)
    assert torch.equal(flags, P.threshold_flags(sh(g), sh(delta), sample))
    assert torch.equal(flags, (g.abs() > delta[:, None]).any(1))


@pytest.mark.parametrize("use_sample", [False, True])
def test_threshold_flags_in_column_blocks(cluster, use_sample):
    """Blocks of 5 coordinates (n·m = 36): the counts summed in shares give the one-pass flags."""
    gen = torch.Generator().manual_seed(7)
    g = torch.randn(4, 9, generator=gen, dtype=torch.float64) * 0.2
    delta = torch.tensor([0.05, 0.3, 0.6, 1.0], dtype=torch.float64)
    sample = torch.tensor([0, 4]) if use_sample else None
    flags, other = cluster.run(cases.threshold, g, delta, sample, 5)
    assert torch.equal(flags, other)
    assert torch.equal(flags, (g.abs() > delta[:, None]).any(1))
    assert flags.tolist() == [True, True, False, False]


def test_threshold_tiny_values_at_the_boundary(cluster):
    # |g| = δ exactly (no flag) vs one ulp above (flag), at 1e-3 where g² < 2^-16
    d = 66 * ULP  # ≈ 1.0e-3
    g = torch.tensor([[d, -d, 0.0], [d, -(d + ULP), 0.0]], dtype=torch.float64)
    flags, _ = cluster.run(cases.threshold, g, torch.tensor([d, d], dtype=torch.float64), None)
    assert flags.tolist() == [False, True]


@MPC_SETTINGS
@given(
    st.integers(1, 4),
    st.integers(2, 4),
    st.sampled_from(["secmi", "newton"]),
    st.sampled_from([-1.0, 1.0]),
    st.integers(0, 2**16),
)
def test_inverse_within_tolerance(cluster, batch, d, method, sign, seed):
    # symmetric indefinite matrices like L-BFGS's K = [[σSᵀS, L], [Lᵀ, −D]], κ ≲ 20
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(batch, d, d, generator=gen, dtype=torch.float64)
    diag = torch.ones(d, dtype=torch.float64)
    diag[d // 2 :] = sign
    k = (a + a.transpose(1, 2)) / 4 + 3 * torch.diag(diag)
    k = torch.round(k / ULP) * ULP
    got, other = cluster.run(cases.inverse, k, method)
    assert torch.equal(got, other)
    exact = torch.linalg.inv(k)
    # SecMI refines until its public residual bound reaches one ulp (docs/NUMERICS.md)
    assert float((got - exact).abs().max()) <= 1e-3 * float(exact.abs().max())


@pytest.mark.parametrize("cond", [1e2, 1e4, 1e7])
def test_secmi_stays_accurate_with_an_ill_conditioned_mask(cluster, cond):
    """A mask R near a singular matrix amplifies the rounding of the opened N = K·R by ‖N⁻¹‖;
    SecMI sees that on N and refines more (κ(R) = 10⁴), or runs Newton–Schulz (10⁷)."""
    gen = torch.Generator().manual_seed(2)
    a = torch.randn(3, 4, 4, generator=gen, dtype=torch.float64)
    k = torch.round(((a + a.transpose(1, 2)) / 4 + 3 * torch.diag(torch.tensor([1.0, 1.0, -1.0, -1.0]))) / ULP) * ULP
    got, other = cluster.run(cases.inverse_with_mask, k, cond)
    assert torch.equal(got, other)
    exact = torch.linalg.inv(k)
    assert float((got - exact).abs().max()) <= 1e-3 * float(exact.abs().max())


@MPC_SETTINGS
@given(st.integers(1, 3), st.integers(2, 4), st.integers(0, 2**16), st.data())
def test_secmi_inverts_when_its_mask_makes_n_singular(cluster, batch, d, seed, data):
    """A mask with a zero column opens an N = K·R that is exactly singular in one matrix of
    the batch; SecMI computes K⁻¹ by Newton–Schulz (nothing more revealed) instead of failing."""
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(batch, d, d, generator=gen, dtype=torch.float64)
    diag = torch.ones(d, dtype=torch.float64)
    diag[d // 2 :] = -1.0
    k = torch.round(((a + a.transpose(1, 2)) / 4 + 3 * torch.diag(diag)) / ULP) * ULP
    at = (data.draw(st.integers(0, batch - 1)), data.draw(st.integers(0, d - 1)))
    got, other = cluster.run(cases.inverse_with_singular_mask, k, seed, at)
    assert torch.equal(got, other)
    exact = torch.linalg.inv(k)
    assert float((got - exact).abs().max()) <= 1e-3 * float(exact.abs().max())


@MPC_SETTINGS
@given(st.integers(1, 3), st.integers(2, 4), st.integers(0, 10), st.integers(0, 2**16))
@example(3, 4, 10, 0)  # entries of 10⁻³
def test_secmi_inverts_small_matrices(cluster, batch, d, exponent, seed):
    """K = 2^-e·K₀ (entries down to 10⁻³): the opened N is coarse (ρ ≥ 1/2 for most masks
    at e = 10) and SecMI's Newton–Schulz runs on K scaled back to unit norm."""
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(batch, d, d, generator=gen, dtype=torch.float64)
    diag = torch.ones(d, dtype=torch.float64)
    diag[d // 2 :] = -1.0
    k = torch.round(2.0**-exponent * ((a + a.transpose(1, 2)) / 4 + 3 * torch.diag(diag)) / ULP) * ULP
    got, other = cluster.run(cases.inverse, k, "secmi")
    assert torch.equal(got, other)
    exact = torch.linalg.inv(k)
    assert float((got - exact).abs().max()) <= 1e-3 * float(exact.abs().max())


def test_division_within_tolerance(cluster):
    b = torch.tensor([0.01, 0.05, 0.1, 0.5, 1.0, 4.0, 20.0, 50.0, 100.0], dtype=torch.float64)
    a = torch.tensor([1.0, -2.5, 0.125, 3.0, -0.01, 7.0, -9.5, 7.0, 13.0], dtype=torch.float64)
    got, _ = cluster.run(cases.divide, a, b)
    # SecDiv tolerance (docs/NUMERICS.md): encoding of b (2^-17/b relative) + 2e-4 relative
    # + 8 ulp per unit of |a|
    bound = (2.0**-17 / b + 2e-4) * (a / b).abs() + 8 * ULP * (1 + a.abs())
    assert ((got["secret"] - a / b).abs() <= bound).all(), got["secret"] - a / b
    assert torch.allclose(got["public"], a / b, atol=1e-3, rtol=1e-3)


def test_square_root_within_tolerance_over_its_range(cluster):
    a = torch.tensor([1e-3, 4e-3, 0.02, 0.3, 1.0, 2.0, 9.0, 40.0, 150.0], dtype=torch.float64)
    got, _ = cluster.run(cases.square_root, a)
    # relative 1e-4 plus the fixed-point encoding of a (2^-17/a relative, halved by the root)
    bound = (1e-4 + 2.0**-18 / a) * a.sqrt() + 4 * ULP
    assert ((got - a.sqrt()).abs() <= bound).all(), (got - a.sqrt()) / a.sqrt()


@settings(
    max_examples=5,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
@given(vec(grid(-16, 19), 17))
def test_client_made_shares_load_without_communication(cluster, x):
    s0, s1 = share(x.numpy())
    got, other = cluster.run(cases.load_and_reveal, (s0, s1))
    assert np.array_equal(got.numpy(), encode(x.numpy()))
    assert torch.equal(got, other)


@MPC_SETTINGS
@given(
    st.integers(1, 5).flatmap(
        lambda n: st.tuples(
            st.integers(0, 2**31),
            st.just(n),
            st.integers(1, 40),
            st.lists(st.integers(-6, 7), min_size=n, max_size=n),
            st.integers(-2, 3).map(lambda e: 2.0**e),
        )
    )
)
def test_secclip_bounds_norm_like_plaintext(cluster, data):
    seed, n, m, exps, clip = data
    gen = torch.Generator().manual_seed(seed)
    scale = torch.tensor([2.0**e for e in exps], dtype=torch.float64).reshape(n, 1)
    x = torch.round(torch.randn(n, m, generator=gen, dtype=torch.float64) * scale / ULP) * ULP
    sigma = 0.5
    got, other = cluster.run(cases.clip_and_noise, x, clip, sigma)
    assert torch.equal(got["noised"], other["noised"]), "parties opened different noised values"
    # the clipped norm never exceeds C (κ absorbs the fixed-point error) and matches the plaintext run
    assert bool((got["clipped"].norm(dim=1) <= clip).all()), got["clipped"].norm(dim=1)
    ref = P.reveal(P.clip_norm(sh(x), clip))
    assert float((got["clipped"] - ref).abs().max()) <= 1e-3 * max(clip, 1.0)
    assert float((got["noised_zero"] - got["clipped"]).abs().max()) == 0.0
    # two parties each add N(0, σ²): the opened noise has variance 2σ² (checked loosely on n·m draws)
    diff = got["noised"] - got["clipped"]
    assert float(diff.abs().max()) < 8 * sigma * math.sqrt(2)


def test_keyed_random_repeats_under_the_same_keys_and_is_the_sum_of_the_two_keyed_halves(cluster):
    """`keyed_random`: the opened tensor is R_0 + R_1, each party's R_p ~ N(0, 1/2) from its own
    key (`keyed_gaussian`); the same keys open the same tensor, another key of one party another."""
    keys, other, n = (bytes([1]) * 32, bytes([2]) * 32), bytes([3]) * 32, 64
    got, theirs = cluster.run(cases.keyed_noise, keys, other, n)
    assert all(torch.equal(got[k], theirs[k]) for k in got)
    assert torch.equal(got["first"], got["again"]) and not torch.equal(got["first"], got["changed"])
    halves = [keyed_gaussian(k, (n,), 1 / math.sqrt(2)) for k in keys]
    assert float((got["first"] - halves[0] - halves[1]).abs().max()) <= 2 * ULP
