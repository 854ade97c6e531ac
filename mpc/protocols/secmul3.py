"""SecMul3: the product of three shared values (Starfish Appendix B, Table V/VI).

    SecMul3([a], [b], [c]) = [a·b·c]   by two sequential SecMul calls

Used by SecGE3/SecGE4 (Algorithm 5 line 3) and SecUE (Algorithm 2).
"""

from __future__ import annotations

from mpc.primitives import Primitives, Public, Secret


def sec_mul3(backend: Primitives, a: Secret, b: Secret | Public, c: Secret | Public) -> Secret:
    """SecMul3: [a·b·c] by two SecMul calls."""
    return backend.mul(backend.mul(a, b), c)
