"""Comparisons of Starfish: SecGE2, SecGE3, SecGE4.

* SecGE2 (§IV-B "Replacing secure division with secure multiplication", Method 1;
  Algorithm 1 line 8): for pairs (u_i, v_i), (u_j, v_j) with v > 0,
  (u_i, v_i) ≽ (u_j, v_j) ⟺ u_i/v_i ≥ u_j/v_j ⟺ u_i·v_j ≥ u_j·v_i.
  Two SecMul and one SecGE, no division. It is computed by `Primitives.ge_prod`
  (portably `ge_of_products`); the CrypTen backend compares the two products *before*
  truncation, so equal products (ties) compare equal exactly and both backends return
  the same bit on grid values.

* SecGE3 (Appendix C, Algorithm 5): compares C_i = (w_i, b_i) and C_j = (w_j, b_j)
  where w = [u ≥ 0] and b = u²/v, i.e. the signed key s = (2w − 1)·√b:
    line 1  x = [w_i ≥ w_j],  x' = [w_j ≥ w_i]            (x·x' = 1 iff same sign)
    line 2  z = [b_i ≥ b_j],  z' = 2·w_i·z − z − w_i
    line 3  r = x + SecMul3(x, x', z')
  With equal signs z' + 1 = w_i·z + (1 − w_i)·(1 − z). For two negative keys this makes
  equal b compare as "not ≥"; we keep the paper's network but use z_rev = [b_j ≥ b_i]
  for the negative branch (z' = w_i·z + (1 − w_i)·z_rev − 1), so the result is exactly
  [s_i ≥ s_j] including ties. All comparisons of lines 1–2 go into ONE SecGE call.

* SecGE4 (Appendix C, text after Algorithm 5): SecGE3 with line 2's comparison on
  B = (w, a, v), a = u², replaced by SecGE2((a_i, v_i), (a_j, v_j)) — no division.
"""

from __future__ import annotations

from mpc.primitives import Primitives, Public, Secret
from mpc.protocols.secmul3 import sec_mul3


def ge_of_products(
    backend: Primitives, a: Secret, b: Secret | Public, c: Secret | Public, d: Secret | Public
) -> Secret:
    """[a·b ≥ c·d] as SecGE(SecMul(a, b), SecMul(c, d)): the portable `Primitives.ge_prod`."""
    return backend.ge(backend.mul(a, b), backend.mul(c, d))


def sec_ge2(backend: Primitives, u_i: Secret, v_i: Secret, u_j: Secret, v_j: Secret) -> Secret:
    """SecGE2: shared bit [u_i·v_j ≥ u_j·v_i], element-wise (one batched comparison)."""
    return backend.ge_prod(u_i, v_j, u_j, v_i)


def _signed_combine(backend: Primitives, w_i: Secret, x: Secret, x_rev: Secret, z: Secret, z_rev: Secret) -> Secret:
    """Algorithm 5 lines 2–3 given the comparison bits.

    z' = w_i·z + (1 − w_i)·z_rev − 1 = w_i·(z − z_rev) + z_rev − 1 ;  r = x + x·x'·z'.
    """
    z_prime = backend.sub(backend.add(backend.mul(w_i, backend.sub(z, z_rev)), z_rev), 1.0)
    return backend.add(x, sec_mul3(backend, x, x_rev, z_prime))


def _split(backend: Primitives, bits: Secret, parts: int) -> list[Secret]:
    return [backend.index(bits, k) for k in range(parts)]


def sec_ge3(backend: Primitives, w_i: Secret, b_i: Secret, w_j: Secret, b_j: Secret) -> Secret:
    """SecGE3 (Algorithm 5): [(2w_i − 1)·√b_i ≥ (2w_j − 1)·√b_j] with one batched SecGE."""
    left = backend.stack([w_i, w_j, b_i, b_j])
    right = backend.stack([w_j, w_i, b_j, b_i])
    x, x_rev, z, z_rev = _split(backend, backend.ge(left, right), 4)
    return _signed_combine(backend, w_i, x, x_rev, z, z_rev)


def sec_ge4(
    backend: Primitives, w_i: Secret, a_i: Secret, v_i: Secret, w_j: Secret, a_j: Secret, v_j: Secret
) -> Secret:
    """SecGE4 (Appendix C): SecGE3 with z = SecGE2((a_i, v_i), (a_j, v_j)); no division.

    Compares the signed keys (2w − 1)·√(a/v); the sign comparisons and both directions of
    SecGE2 are batched (one SecGE call, one SecGE2 call).
    """
    x, x_rev = _split(backend, backend.ge(backend.stack([w_i, w_j]), backend.stack([w_j, w_i])), 2)
    z, z_rev = _split(
        backend,
        sec_ge2(
            backend,
            backend.stack([a_i, a_j]),
            backend.stack([v_i, v_j]),
            backend.stack([a_j, a_i]),
            backend.stack([v_j, v_i]),
        ),
        2,
    )
    return _signed_combine(backend, w_i, x, x_rev, z, z_rev)
