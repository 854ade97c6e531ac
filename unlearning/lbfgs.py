"""Compact L-BFGS Hessian–vector product over any `Backend` (Starfish SecUE, Algorithm 2).

The paper's Equation 3 keeps an m×m inverse-Hessian approximation, infeasible for a model
of m parameters. We use the compact representation of Byrd, Nocedal and Schnabel (1994,
Theorem 2.3), as FedRecover's implementation does: with k curvature pairs, rows of
S = [s_1 … s_k]ᵀ (model differences, PUBLIC) and Y = [y_1 … y_k]ᵀ (gradient differences,
SECRET), the BFGS matrix started from B_0 = σ_k·I is

    B_k = σ_k I − [σ_k S, Y] · K⁻¹ · [σ_k Sᵀ ; Yᵀ],
    K   = [[σ_k SᵀS, L], [Lᵀ, −D]]   (2k × 2k),
    A   = SᵀY,  D = diag(A),  L = strictly-lower(A),  σ_k = (y_kᵀ s_k)/(s_kᵀ s_k),

so for a unit direction v̂, with p = [σ_k Sᵀv̂ ; Yᵀv̂] and q = K⁻¹·p = [q₁ ; q₂],

    B_k·v̂ = [v̂, S, Y] · c,    c = [σ_k, −σ_k q₁, −q₂]   (1 + 2k coefficients).

Per buffer state (the pairs change only when a pair enters) a client's `CompactForm` holds
A, the secret k×k Gram matrix YᵀY, σ_k and D·K⁻¹ with D = diag(σ_k·I, I) (one SecMI per
buffer state), so the coefficients' tail −D·K⁻¹·p is one small product per round. Per round the
only m-sized work is local (Yᵀv̂, a public-operand product) plus one secret product Y·c_y
that expands the coefficients — a fixed-operand product (`Backend.fix`, `fixed_matmul`):
each row ŷ is opened under a mask once (Starfish: when its pair enters), a round opens only c_y;
‖B_k v̂‖² = cᵀGc with G = [v̂, S, Y]ᵀ[v̂, S, Y] built from public blocks, Yᵀv̂, A and YᵀY
(no m-sized secure square). Products of a secret with a long public vector use
`Backend.dot` (elementwise, one truncation of the sum) per client, not batched matmuls
with long inner dimensions.

Held rows: a client's ŷ_j may be held as rows y_j with a public scale λ_j, ŷ_j = λ_j·y_j
(`y_scale` (n, k), None when every λ is 1; Starfish holds the raw rows of a step shorter
than 1, so a pair entry opens them once). λ_j goes on the other factor of each product,
never on the secret rows: into the public operand of the local products (A = SᵀY with
operand λ_j·ŝ_i, Yᵀv̂ with λ_j·v̂: encoded once, one truncation as before) and into the
coefficients before the expansion (Y·c_y = Y_held·(λ ⊙ c_y), n·k values). YᵀY is given
in ŷ's units.

The curvature safeguards (docs/ALGORITHM.md §3, "safeguards") are here too so both backends apply the
same rule: a pair is kept only if yᵀs ≥ max(ε, CURVATURE_FLOOR)·sᵀs and ‖y‖² ≤ κ·yᵀs (one
revealed bit per client and pair), and a correction with ‖Hv‖ > c·‖g‖ is dropped obliviously
(nothing revealed).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar, overload

import torch

from mpc.backend import Backend, Fixed, Prepared, Public, Secret
from mpc.fixedpoint import DEFAULT_PRECISION_BITS

CURVATURE_FLOOR = 16.0 * 2.0**-DEFAULT_PRECISION_BITS
"""The least curvature ŝᵀŷ = yᵀs/sᵀs of a kept pair (2^-12 at f = 16), whatever ε. The newest
pair's ŝ_kᵀŷ_k is both σ_k and K's last diagonal entry −D_kk; K's first row is σ_k·ŝ_1ᵀŝ_j then
zeros (L is strictly lower) and its last row zeros then −D_kk. Below the fixed-point grid both
encode to 0, so K — and every N = K·R that SecMI opens — is singular (a curvature of 5·10⁻⁶
passes ε = 10⁻⁶ and failed 19 inversions in 20 under 2PC). Sixteen ulps keep every σ_k and
D_ii nonzero, each encoded within 2^-5 of itself."""


@dataclass(frozen=True)
class CompactForm:
    """The per-buffer-state quantities of n clients with k pairs each (secret, small)."""

    a: Secret  #: (n, k, k) A = SᵀY, a[i, j] = ŝ_iᵀŷ_j
    yy: Secret  #: (n, k, k) YᵀY
    sigma: Secret  #: (n,) σ_k
    dkinv: Secret  #: (n, 2k, 2k) D·K⁻¹, D = diag(σ_k·I_k, I_k)


PerClient = Secret | Sequence[Secret]
"""Secret rows of n clients: stacked (n, k, m), or one (k, m) per client (e.g. stacked on access)."""


Row = TypeVar("Row")
Derived = TypeVar("Derived")


def per_distinct(rows: Sequence[Row], make: Callable[[Row], Derived]) -> list[Derived]:
    """make(row) for every client's public rows, computed once per distinct object: clients
    whose rows are the same tensor (Starfish: pairs of the same rounds share one ŝ stack)
    share the result. The rows are held until the end, so no object id is reused meanwhile."""
    done: dict[int, tuple[Row, Derived]] = {}
    for row in rows:
        if id(row) not in done:
            done[id(row)] = (row, make(row))
    return [done[id(row)][1] for row in rows]


T = TypeVar("T")


class ClientRows(Sequence[T]):
    """Each client's rows, formed on access by `make(c)` and never kept: a loop over the
    clients holds one client's rows at a time instead of all n."""

    def __init__(self, make: Callable[[int], T], n: int) -> None:
        self._make = make
        self._n = n

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, c: int) -> T: ...

    @overload
    def __getitem__(self, c: slice) -> Sequence[T]: ...

    def __getitem__(self, c: int | slice) -> T | Sequence[T]:
        if isinstance(c, slice):
            return [self[i] for i in range(self._n)[c]]
        if not -self._n <= c < self._n:
            raise IndexError(c)
        return self._make(c % self._n)


def unit_scale(scale: torch.Tensor | None) -> bool:
    """Whether held rows with these public scales are ŷ itself (no scale, or every λ = 1)."""
    return scale is None or bool(torch.all(scale == 1.0))


def held_operand(rows: torch.Tensor, scale: torch.Tensor | None) -> torch.Tensor:
    """The public rows (r, m) as the operand of a local product with one client's held rows
    y (k, m), ŷ_j = scale_j·y_j: (r, 1, m) when the scale is None or all 1, else (r, k, m)
    with [i, j] = scale_j·rows_i, so that the product gives rows_iᵀŷ_j (module docstring)."""
    rows = rows.reshape(rows.shape[0], 1, -1)
    if unit_scale(scale):
        return rows
    return rows * scale.to(rows.dtype).reshape(1, -1, 1)


def client_rows(backend: Backend, y: PerClient, c: int) -> Secret:
    """Client c's rows (k, m) of `y` (a view of a stacked secret, or the c-th of a sequence)."""
    return backend.index(y, c) if isinstance(y, Secret) else y[c]


def client_count(y: PerClient | Sequence[torch.Tensor]) -> int:
    """n, the clients of per-client rows."""
    return int(y.shape[0]) if isinstance(y, Secret) else len(y)


def local_dots(backend: Backend, y: PerClient, rows: Sequence[Public]) -> Secret:
    """[rows_c · y_c,j] per client c: y (n, k, m) secret, rows[c] (r, 1, m) public → (n, r, k).

    Local (public operand); one client at a time so the untruncated products stay r·k·m.
    """
    out = []
    for c in range(client_count(y)):
        rows_c = client_rows(backend, y, c)
        k, m = rows_c.shape
        out.append(backend.dot(backend.reshape(rows_c, (1, k, m)), rows[c]))
    return backend.stack(out, dim=0)


def middle_matrix(backend: Backend, ss: torch.Tensor, a: Secret) -> tuple[Secret, Secret]:
    """K = [[σ_k SᵀS, L], [Lᵀ, −D]] and σ_k from SᵀS (n, k, k) public and A = SᵀY (n, k, k) secret.

    σ_k = A[k,k] / (s_kᵀ s_k) is local (public denominator). Returns (K (n, 2k, 2k), σ (n,)).
    """
    n, _, k = ss.shape
    sigma = backend.mul(backend.index(a, (slice(None), k - 1, k - 1)), 1.0 / ss[:, k - 1, k - 1])
    lower = backend.mul(a, torch.tril(torch.ones(k, k, dtype=torch.float64), diagonal=-1))
    diag = backend.mul(a, torch.eye(k, dtype=torch.float64))
    top_left = backend.mul(backend.reshape(sigma, (n, 1, 1)), ss)
    top = backend.cat([top_left, lower], dim=2)
    bottom = backend.cat([backend.transpose(lower, 1, 2), backend.neg(diag)], dim=2)
    return backend.cat([top, bottom], dim=1), sigma


def gram(backend: Backend, y: Secret) -> Secret:
    """[YᵀY] (n, k, k) from scratch: k² secure dot products of length m per client."""
    n, k, m = y.shape
    return backend.dot(backend.reshape(y, (n, k, 1, m)), backend.reshape(y, (n, 1, k, m)))


def compact_form(
    backend: Backend,
    s: torch.Tensor,
    y: Secret,
    yy: Secret,
    inverse: str = "secmi",
    y_scale: torch.Tensor | None = None,
) -> CompactForm:
    """The `CompactForm` of pairs s (n, k, m) public and y (n, k, m) secret held rows
    (ŷ = y_scale ⊙ y, module docstring) with YᵀY given."""
    n, k, m = s.shape
    operands = ClientRows(lambda c: held_operand(s[c], None if y_scale is None else y_scale[c]), n)
    a = local_dots(backend, y, operands)  # a[i, j] = ŝ_iᵀŷ_j
    kmat, sigma = middle_matrix(backend, torch.matmul(s, s.transpose(1, 2)), a)
    kinv = backend.inverse(kmat, inverse)  # SecMI refines to its fixed-point floor (protocols/secmi.py)
    # the rows of q₁ scaled by σ_k once per buffer state: −D·K⁻¹·p is then c's tail in one product
    scale = backend.cat([backend.reshape(sigma, (n, 1)), backend.add(backend.zeros((n, 1)), 1.0)], dim=1)
    scale = backend.reshape(backend.index(scale, (slice(None), [0] * k + [1] * k)), (n, 2 * k, 1))
    return CompactForm(a=a, yy=yy, sigma=sigma, dkinv=backend.mul(scale, kinv))


def coefficients(
    backend: Backend,
    form: CompactForm,
    s: Sequence[torch.Tensor],
    y: PerClient,
    v_hat: torch.Tensor,
    y_scale: torch.Tensor | None = None,
) -> tuple[Secret, Secret]:
    """c = [σ_k, −σ_k q₁, −q₂] = [σ_k, −D·K⁻¹·p] (n, 1 + 2k), p = [σ_k Sᵀv̂ ; Yᵀv̂]; and Yᵀv̂ (n, k).

    `s`: each client's public rows (k, m) (a stacked (n, k, m) tensor is one), `y` its secret
    held rows (ŷ = y_scale ⊙ y): read one client at a time, so nothing of size n·k·m is
    formed here. The operand v̂ (or λ_j·v̂) is encoded once per distinct scale.
    """
    n = client_count(y)
    sv = torch.stack(per_distinct([s[c] for c in range(n)], lambda rows: torch.matmul(rows, v_hat)))  # (n, k) Sᵀv̂
    k = sv.shape[1]
    operands: dict[tuple[float, ...], Prepared] = {}

    def v_operand(c: int) -> Prepared:
        scale = None if y_scale is None else y_scale[c]
        key = () if unit_scale(scale) else tuple(scale.tolist())
        if key not in operands:
            operands[key] = backend.prepare(held_operand(v_hat.reshape(1, -1), scale))
        return operands[key]

    yv = backend.reshape(local_dots(backend, y, ClientRows(v_operand, n)), (n, k))
    sigma_col = backend.reshape(form.sigma, (n, 1))
    p = backend.reshape(backend.cat([backend.mul(sigma_col, sv), yv], dim=1), (n, 2 * k, 1))
    tail = backend.neg(backend.reshape(backend.matmul(form.dkinv, p), (n, 2 * k)))
    return backend.cat([sigma_col, tail], dim=1), yv


def product_square(
    backend: Backend, form: CompactForm, s: Sequence[torch.Tensor], v_hat: torch.Tensor, yv: Secret, c: Secret
) -> Secret:
    """‖[v̂, S, Y]·c‖² = cᵀGc (n,), G = [[1, v̂ᵀS, v̂ᵀY], [Sᵀv̂, SᵀS, SᵀY], [Yᵀv̂, YᵀS, YᵀY]].

    The public blocks enter G as constants (per client from its rows `s[c]` (k, m)); the
    secret ones are Yᵀv̂, A and YᵀY. Two small secret products (G·c, then cᵀ(G·c)); nothing
    of size m.
    """
    n, k = yv.shape

    def basis_gram(rows: torch.Tensor) -> torch.Tensor:
        basis = torch.cat([v_hat.reshape(1, -1), rows], dim=0)  # (1+k, m) public
        return torch.matmul(basis, basis.transpose(0, 1))

    grams = per_distinct([s[c] for c in range(n)], basis_gram)
    public = backend.add(backend.zeros((n, 1 + k, 1 + k)), torch.stack(grams))
    cross = backend.cat([backend.reshape(yv, (n, 1, k)), form.a], dim=1)  # (n, 1+k, k) [v̂ᵀY ; SᵀY]
    top = backend.cat([public, cross], dim=2)
    bottom = backend.cat([backend.transpose(cross, 1, 2), form.yy], dim=2)
    g = backend.cat([top, bottom], dim=1)  # (n, 1+2k, 1+2k)
    gc = backend.reshape(backend.matmul(g, backend.reshape(c, (n, 1 + 2 * k, 1))), (n, 1 + 2 * k))
    return backend.dot(c, gc)


def expand(
    backend: Backend,
    s_rows: Sequence[Public],
    y_rows: Sequence[Fixed],
    v_hat: torch.Tensor,
    c: Secret,
    base: Secret | None = None,
    scale: float | None = None,
    y_scale: torch.Tensor | None = None,
    cols: torch.Tensor | None = None,
) -> Secret:
    """[v̂, S, Y]·c (n, m), or base + scale·[v̂, S, Y]·c; `y_rows` hold ŷ = y_scale ⊙ y.
    `cols`: only these public coordinates, (n, |cols|) (`base` given on them), for a few
    sampled ones: Y(cols)·c_y is then one Beaver product of the held rows' columns as
    secrets (`Backend.fixed_secret`), n·k·(|cols| + 1) values opened and a dealer triple of
    that size instead of the fixed-operand product's m-sized pair per client.

    The scale goes into the coefficients (c ← scale·c: n·(2k+1) values, one truncation
    each) instead of into m-sized rows. Y·c_y is one fixed-operand product for the batch
    (`y_rows`: the n·k rows ŷ fixed by `Backend.fix`, client-major), which opens only c_y
    (n·k values). The public part [v̂; S_c]·[c₀; c_s] is local: one product per client with
    the stack [v̂; S_c] ((k+1, m), prepared once for consecutive clients whose `s_rows` are
    the same object, e.g. pairs of the same rounds), k+1 multiply-adds and ONE truncation.
    The rows are formed one client at a time (elementwise: the same values as whole-batch
    operations), so the temporaries are m-sized, not n·m."""
    n, k, m = c.shape[0], (c.shape[1] - 1) // 2, v_hat.numel()
    if scale is not None:
        c = backend.mul(c, scale)
    c_y = _held_coefficients(backend, backend.index(c, (slice(None), slice(1 + k, 1 + 2 * k))), y_scale, (n, 1, k))
    if cols is None:
        secret_part = backend.reshape(backend.fixed_matmul(c_y, y_rows, (n, k, m)), (n, m))
    else:
        picked = backend.stack([backend.index(backend.fixed_secret(row), cols) for row in y_rows])
        secret_part = backend.reshape(
            backend.matmul(c_y, backend.reshape(picked, (n, k, cols.numel()))), (n, cols.numel())
        )
    c_public = backend.index(c, (slice(None), slice(0, 1 + k)))
    rows: list[Secret] = []
    stack_of: Public | None = None
    for i in range(n):
        if s_rows[i] is not stack_of:  # one stack held at a time; consecutive clients sharing S_c share it
            stack_of = s_rows[i]
            stack = public_stack(backend, v_hat, stack_of, cols)
        one = slice(i, i + 1)
        row = backend.add(backend.matmul(backend.index(c_public, one), stack), backend.index(secret_part, one))
        rows.append(row if base is None else backend.add(backend.index(base, one), row))
    return backend.cat(rows, dim=0)


def expand_sum(
    backend: Backend,
    s_rows: Sequence[Public],
    y_rows: Sequence[Fixed],
    v_hat: torch.Tensor,
    c: Secret,
    scale: torch.Tensor,
    y_scale: torch.Tensor | None = None,
) -> Secret:
    """Σ_i scale_i·[v̂, S_i, Y_i]·c_i, shape (m,): the weighted sum of `expand`'s rows, never
    forming them (n public scales; `y_rows` hold ŷ = y_scale ⊙ y).

    The scales go into the coefficients (c_i ← scale_i·c_i). The secret part is ONE
    fixed-operand product [c_y,1 … c_y,n]·[Y_1; …; Y_n] ((1, n·k) by (n·k, m)): it opens the
    same n·k values as `expand`'s, but its pair (A, [A·B]) has m elements where `expand`'s has
    n·m, so the dealer sends m ring elements per round instead of n·m. The public part adds
    the coefficient rows [c₀; c_s] of the clients sharing one ŝ stack (local, 1 + k values
    each) and makes one product with [v̂; S] per distinct stack (one truncation)."""
    n, k, m = c.shape[0], (c.shape[1] - 1) // 2, v_hat.numel()
    c = backend.mul(c, scale.to(torch.float64).reshape(n, 1))
    c_y = _held_coefficients(backend, backend.index(c, (slice(None), slice(1 + k, 1 + 2 * k))), y_scale, (1, n * k))
    total = backend.reshape(backend.fixed_matmul(c_y, y_rows, (n * k, m)), (m,))
    c_public = backend.index(c, (slice(None), slice(0, 1 + k)))
    sharing: dict[int, tuple[Public, list[int]]] = {}
    for i in range(n):
        sharing.setdefault(id(s_rows[i]), (s_rows[i], []))[1].append(i)
    for rows, members in sharing.values():
        stack = public_stack(backend, v_hat, rows)
        coeff = backend.sum(backend.index(c_public, torch.tensor(members, dtype=torch.long)), dim=0)
        total = backend.add(total, backend.reshape(backend.matmul(backend.reshape(coeff, (1, 1 + k)), stack), (m,)))
    return total


def _held_coefficients(backend: Backend, c_y: Secret, y_scale: torch.Tensor | None, shape: tuple[int, ...]) -> Secret:
    """The coefficients (n, k) of ŷ as those of the held rows, λ ⊙ c_y (Y·c_y = Y_held·(λ ⊙ c_y):
    n·k values, one truncation), reshaped to `shape` for the fixed-operand product."""
    if not unit_scale(y_scale):
        c_y = backend.mul(c_y, y_scale.to(torch.float64))
    return backend.reshape(c_y, shape)


def public_stack(backend: Backend, v_hat: torch.Tensor, s_rows: Public, cols: torch.Tensor | None = None) -> Prepared:
    """[v̂; S] ((k + 1, m)), or its columns `cols`, prepared for products: the public operand
    of the expansion."""
    s = s_rows.value if isinstance(s_rows, Prepared) else torch.as_tensor(s_rows)
    stack = torch.cat([v_hat.reshape(1, -1).to(s.dtype), s.reshape(-1, v_hat.numel())])
    return backend.prepare(stack if cols is None else stack[:, cols])


def fix_rows(backend: Backend, y: Secret) -> list[Fixed]:
    """The rows y[c, i] of a secret (n, k, m) fixed for products, client-major (one opening)."""
    n, k, _ = y.shape
    return backend.fix([backend.index(y, (c, i)) for c in range(n) for i in range(k)])


def hessian_vector_product(
    backend: Backend, s: torch.Tensor, y: Secret, v: torch.Tensor, inverse: str = "secmi"
) -> Secret:
    """B_k·v by the compact form (module docstring) for every client of the batch.

    s: (n, k, m) public pairs; y: (n, k, m) secret pairs; v: (m,) public direction.
    Returns a secret (n, m). `inverse` selects SecMI ("secmi") or Newton–Schulz ("newton").
    """
    v = v.to(torch.float64)
    v_norm = float(torch.linalg.vector_norm(v))
    form = compact_form(backend, s, y, gram(backend, y), inverse)
    c, _ = coefficients(backend, form, s, y, v / v_norm)
    return expand(backend, list(s), fix_rows(backend, y), v / v_norm, c, scale=v_norm)


def squared_norms(backend: Backend, x: Secret) -> Secret:
    """‖x_j‖² per row of a secret (n, m), as elementwise dot products (one truncation each)."""
    return backend.dot(x, x)


def curvature_accepted(
    backend: Backend, s: torch.Tensor, y: Secret, eps: float, kappa: float, y2: Secret | None = None
) -> tuple[torch.Tensor, Secret]:
    """Safeguard 1: reveal, per client, whether the new pair (s, y) may enter its buffer.

    Accepted iff yᵀs ≥ ε'·sᵀs, ε' = max(ε, CURVATURE_FLOOR) (positive curvature that K's
    fixed-point entries resolve) AND ‖y‖² ≤ κ·yᵀs (the "cautious" bound
    of Li and Fukushima: every rank-one term y yᵀ/(yᵀs) of the BFGS update has norm ≤ κ, so
    σ_k ≤ κ, ‖B_k‖ ≤ (k+1)·κ and ‖ŷ‖ = ‖y‖/‖s‖ ≤ κ — bounded fixed-point magnitudes).
    s: (m,) public (the same model difference for every client), y: (n, m) secret, raw
    (not normalised, so ‖y‖² stays at gradient scale). yᵀs is local; ‖y‖² is `y2` when the
    caller has it (Starfish: from y's fixed operands, `Backend.fixed_dot`), else one secure
    square per client. Returns the public bools (n,) (only the combined bit is revealed)
    and [‖y‖²] (n,), which the caller reuses for the new Gram entry ‖ŷ‖².
    """
    s = s.to(torch.float64)
    n = y.shape[0]
    curvature = backend.dot(y, s)  # (n,) yᵀs, local
    y2 = squared_norms(backend, y) if y2 is None else y2
    floor = max(float(eps), CURVATURE_FLOOR) * float(torch.dot(s, s))
    # both tests as one comparison with 0 (2n values, one SecGE's rounds): yᵀs − ε'·sᵀs, κ·yᵀs − ‖y‖²
    margins = backend.cat([backend.sub(curvature, floor), backend.sub(backend.mul(curvature, float(kappa)), y2)])
    bits = backend.ge(margins, 0.0)
    both = backend.mul(backend.index(bits, slice(0, n)), backend.index(bits, slice(n, 2 * n)))
    return backend.reveal(both) > 0.5, y2


def correction_kept(backend: Backend, hv2: Secret, g2: Secret, bound: float, v_norm: float) -> Secret:
    """Safeguard 2: the shared bit [‖H v‖ ≤ c·‖g‖] with ‖H v‖ = ‖v‖·‖H v̂‖ — nothing revealed.

    `hv2` is ‖H v̂‖² for the unit direction v̂ = v/‖v‖, `g2` is ‖g‖². Squared norms are
    compared ([(c/‖v‖)²‖g‖² ≥ ‖H v̂‖²], no square root); the public factor is applied to
    whichever side it shrinks, so no fixed-point magnitude grows. The caller multiplies the
    bit into the coefficients c (an exact product with a bit), dropping the correction.
    """
    factor = (float(bound) / float(v_norm)) ** 2
    if factor <= 1.0:
        return backend.ge(backend.mul(g2, factor), hv2)
    return backend.ge(g2, backend.mul(hv2, 1.0 / factor))
