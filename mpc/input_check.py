"""Validation of one client's secret-shared upload in 2PC, opening only verdicts
(docs/PRIVACY.md, "Validated uploads").

Party p holds, for one client: [x]_p ∈ Z_2^64^m, the fixed-point encoding x = round(g·2^f) of
its gradient; [N]_p, the encoding of its reported ‖g‖; [δ]_p, the encoding of its reported δ.
Public: m, f and the operator's norm bound C (`CheckBounds`). With A = ⌊C·2^f + ½⌋ and
b = bitlength(A) (so every honest |x_i| ≤ A < 2^b), the four checks are exact statements
about the centred integers behind the shares:

* ``range``: every |x_i| < 2^b is accepted; any |x_i| ≥ 3·2^b is refused;
* ``norm``: ‖x‖² ≤ T = ⌈(C·2^f + √m/2)²⌉ is accepted; ‖x‖² > T + 2^bitlength(T) (≤ 3T + 1,
  i.e. ‖g‖ beyond about √3·C) is refused;
* ``reported_norm``: 0 ≤ N < 2^b and |N² − ‖x‖²| ≤ tol (the rounding of an honest client,
  tol = ⌈D·(2√T + D)⌉, D = √m/2 + 2) are accepted; N outside [−2^b, 2^(b+1)) or a gap beyond
  tol + 2^bitlength(2·tol) is refused;
* ``delta``: 0 ≤ δ < 2^b (δ ≤ max|g_i| ≤ C) is accepted; δ outside [−2^b, 2^(b+1)) is refused.

Between "accepted" and "refused" the verdict depends on the fresh masks (it is random).

**Sketched check.** For m > r·k (`SketchShape`, default 2 × 4,096) the four checks run on
y = S·x, a public count sketch of x (`mpc.count_sketch`) that each party applies to its own
share without communication (`checked_inputs`), drawn per attempt from HMAC over the
batch's seeds (`batch_sketch`). The bounds become those of v = y (`CheckBounds.dim`,
`vector_bits`, `vector_norm_sq`, `vector_tolerance`, `norm_weight`): E‖y‖² = r·‖x‖² with
relative standard deviation ≤ √(2/(rk)), so ‖y‖² is accepted up to ⌈r·(1 + ε)·T⌉ with
ε = 8·√(2/(rk)); a bucket sum is accepted below 2^bitlength(⌈7.5·(⌊√T⌋ + 1)⌉); the reported
norm is compared as |r·N² − ‖y‖²| ≤ r·tol + ⌈ε·r·T⌉. Soundness and slack are in
docs/PRIVACY.md, "The sketched check". Below, "x" and "m" are the checked vector and its
length (y and r·k when sketched).

**Window test** W(v, k), the one primitive (k ≥ 33): is the shared v in [0, 2^k)?
1. (Second attempt only) re-share with a mask ρ drawn from the seed: v_0 + ρ, v_1 − ρ.
2. Local shifts (SecureML's truncation, unsigned): u_0 = v_0 >> k, u_1 = −((−v_1) >> k).
   h = u_0 + u_1 = ⌊a/2^k⌋ − ⌊c/2^k⌋ with a = v_0, c = −v_1 read as unsigned, so h is an exact
   integer, |h| < 2^(64−k), and h ∈ {⌊(a − c)/2^k⌋, ⌊(a − c)/2^k⌋ + 1} where a − c is v or v ± 2^64
   (the pair wraps: for uniform shares with probability |v|/2^64).
3. t = h(h − 1) is exact (h² < 2^62) and non-negative; t = 0 iff h ∈ {0, 1}. If v ∈ [0, 2^k) and
   the pair does not wrap, t = 0. If t = 0 then a − c ∈ [−2^k, 2^k), which is far from ±2^64,
   so a − c = v: every v ∉ [−2^k, 2^(k+1)) gives t ≠ 0 *whatever the shares* — a client that
   chooses its own shares gains nothing, so soundness needs no re-sharing; ρ only gives an
   honest client whose shares happened to wrap a second, independent chance.
   t = (u_0² − u_0) + (u_1² − u_1) + 2·u_0·u_1; the cross term is a *private* dot product
   (u_0 is party 0's alone, u_1 party 1's): with the dealer's α (party 0's), β (party 1's) and
   shares of α·β (`private_dot`), party 0 sends u_0 − α, party 1 sends u_1 − β, and
   u_0·u_1 = α·(u_1 − β) + [α·β]_0 + (u_0 − α)·u_1 + [α·β]_1.
A vector's t_i are folded as Σ r_i·t_i with public uniform r (from the seed): a nonzero t has
2-adic valuation ≤ 30 (|h| < 2^31), so Pr[Σ r_i·t_i = 0 | some t_i ≠ 0] ≤ 2^−34. Scalar t's
are summed (each < 2^62, so the sum of three cannot wrap to 0).

**Order of the checks.** The coarse window on x + 2^32 bounds every |x_i| < 3·2^32, which
makes the fine window on 2^(32−b)·x + 2^32 exact (no overflow), which bounds |x_i| < 3·2^b,
which makes S = ‖x‖² = Σ x_0² + 2·x_0·x_1 + Σ x_1² exact (9m·2^(2b) < 2^63, `largest_norm`),
and so on. All run at once; a verdict is the conjunction, so each conclusion holds whenever
the checks it rests on passed.

**What is opened.** Per check one ring element z = Σ r_i·t_i (or Σ t): exactly 0 for an
accepted upload, which so reveals nothing beyond "accepted". The masked differences
u − α, u − β, x_p − α are uniform. A refused upload reveals its z (a function of its input).
The fold weights r are drawn from the per-client seed, which party0 draws with `secrets`
only after the uploads are fixed, so a client cannot aim at them.

**Batches** (`check_batch`): the n items of a batch are checked together, vectorised — each
item keeps its own seed (so its own fold weights and masks) and its own verdict, but every
step concatenates all items' vectors into one exchange, and the dealer's correlation for the
whole attempt (3n vector rows of length m, 7n scalar rows) is one `private_dot` request
(n·10 words to party 0), which runs on a thread beside step 0's local shifts. Step 0 opens
the differences of the three vector products and five scalar ones per item (n·(3m + 5) words
each way), step 1 those of the two scalar windows on S (2n words), step 2 the four z per
item (4n words). An honest upload fails a window only when a fresh mask makes its shares
wrap (< m·2^32/2^64 per vector window), so the items a first attempt refused are checked
once more, together, each under a second seed before their verdict is final (steps 3–5); a
dishonest one is refused both times but for probability ≤ 2^−34 per check and try. A batch
is so 3 exchanges (6 when something is re-checked) and 1 dealer request (2), whatever n;
`batch_sizes` cuts a batch whose step-0 vector would exceed `MAX_STEP_WORDS` into several
such checks.
"""

from __future__ import annotations

import hashlib
import hmac
import math
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from mpc.count_sketch import CountSketch
from mpc.masks import labelled_words

K = 33
"""The smallest window exponent: h stays below 2^31, so h(h − 1) cannot wrap."""
OFFSET = 1 << (K - 1)
CHECKS = ("range", "norm", "reported_norm", "delta")
ATTEMPTS = 2
SEED_BYTES = 32
MAX_STEP_WORDS = 1 << 24
"""The longest step-0 vector (and stack of held gradients) a vectorised check builds (128 MiB);
a larger batch is cut up."""
SKETCH_SIGMAS = 8
"""The sketched check's slack ε = 8·√(2/(r·k)): eight standard deviations of the estimate
‖y‖²/(r·‖x‖²) (module doc, "Sketched check"); 0.125 for the default r·k = 8192."""
SKETCH_HEADROOM = 7.5
"""The sketched range window accepts |y_j| < 2^bitlength(⌈7.5·√T⌉): an honest bucket sum is
sub-Gaussian with variance at most ‖x‖² ≤ T, so it lands outside with probability
≤ 2e^−28 ≈ 1.4·10^−12 (below 1.2·10^−8 over the 8,192 buckets)."""


@dataclass(frozen=True)
class SketchShape:
    """r blocks of k buckets (`mpc.count_sketch`); models with m ≤ r·k are checked exactly."""

    sketches: int = 2
    buckets: int = 4096

    @property
    def dim(self) -> int:
        return self.sketches * self.buckets

    @property
    def slack(self) -> float:
        """ε: ‖y‖² is accepted up to r·(1 + ε)·T."""
        return SKETCH_SIGMAS * math.sqrt(2 / self.dim)


class Exchange(Protocol):
    def __call__(self, step: int, mine: np.ndarray) -> np.ndarray:
        """Send this party's int64 vector of `step`; return the other party's vector of that step."""


class Correlation(Protocol):
    def private_dots(self, shapes: list[tuple[int, int]]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per block (rows, length): this party's masks — α for party 0, β for party 1 — and
        its share (rows,) of the row products α_r·β_r; all blocks in one `private_dot` request."""


def largest_norm(num_params: int, precision_bits: int, sketch: SketchShape = SketchShape()) -> float:
    """The largest C the ring allows for m = `num_params` (`CheckBounds.fits`): C = (2^b − 2)/2^f
    for the largest b ≤ 32 that fits, or 0.0 if none does. A sketched check's limit is set by
    its range window, which grows with √T rather than with b, so there C is then raised by
    bisection to the largest value that still fits (`fits` is monotone in C)."""
    for b in range(K - 1, 3, -1):
        norm = (2**b - 2) / 2**precision_bits
        if CheckBounds(num_params, precision_bits, norm, sketch).fits():
            break
    else:
        return 0.0
    if not CheckBounds(num_params, precision_bits, norm, sketch).sketched:
        return norm
    low, high = norm, (2 ** (b + 1) - 2) / 2**precision_bits
    for _ in range(48):
        middle = (low + high) / 2
        if CheckBounds(num_params, precision_bits, middle, sketch).fits():
            low = middle
        else:
            high = middle
    return low


@dataclass(frozen=True)
class CheckBounds:
    num_params: int
    precision_bits: int
    max_norm: float
    sketch: SketchShape = SketchShape()

    @classmethod
    def make(
        cls, num_params: int, precision_bits: int, max_norm: float, sketch: SketchShape = SketchShape()
    ) -> CheckBounds:
        """Bounds for m = `num_params` coordinates; ValueError (naming the limit) when C does not fit."""
        if num_params < 1:
            raise ValueError(f"a model has at least one parameter, got {num_params}")
        if sketch.sketches < 1 or sketch.buckets < 1 or sketch.buckets & (sketch.buckets - 1):
            raise ValueError(f"a sketch has at least one block of a power of two of buckets, got {sketch}")
        bounds = cls(num_params, precision_bits, float(max_norm), sketch)
        if not (math.isfinite(max_norm) and max_norm > 0 and bounds.fits()):
            top = largest_norm(num_params, precision_bits, sketch)
            raise ValueError(
                f"validation max_norm must be a positive number at most {top:g} for a model of {num_params} "
                f"parameters at precision_bits = {precision_bits} (the checked ‖g‖² must fit the ring), "
                f"got {max_norm!r}"
            )
        return bounds

    def fits(self) -> bool:
        """Whether every quantity the checks compute is exact in Z_2^64: b_v ≤ 32, ‖v‖² ≤ 9d·2^(2b_v)
        below 2^63 once the range check passed, and the two windows on S (`headroom`)."""
        bits = self.vector_bits
        return bits <= K - 1 and 9 * self.dim * (1 << (2 * bits)) < 1 << 63 and self.headroom() < 1 << 63

    def headroom(self) -> int:
        """The largest |2^j·v| of the two windows on S (norm bound, reported norm), given that
        the range and N checks passed (‖v‖² ≤ 9d·2^(2b_v), N² < 2^(2b+2)): must stay below 2^63."""
        s_max = 9 * self.dim * (1 << (2 * self.vector_bits))
        bound, tol = self.vector_norm_sq, self.vector_tolerance
        norm_v = max(bound, s_max) << window_for(bound).scale
        gap_v = (self.norm_weight * (1 << (2 * self.bits + 2)) + 3 * bound + 1 + tol) << window_for(2 * tol).scale
        return max(norm_v, gap_v)

    @property
    def sketched(self) -> bool:
        """Whether the check runs on the sketch y = S·x (m > r·k) rather than on x."""
        return self.num_params > self.sketch.dim

    @property
    def dim(self) -> int:
        """d: the length of the checked vector v (y when sketched, else x)."""
        return self.sketch.dim if self.sketched else self.num_params

    @property
    def vector_bits(self) -> int:
        """b_v: honest |v_j| < 2^b_v (b for x; bitlength(⌈7.5·(⌊√T⌋ + 1)⌉) for a bucket sum of y)."""
        if not self.sketched:
            return self.bits
        return math.ceil(SKETCH_HEADROOM * (math.isqrt(self.norm_sq) + 1)).bit_length()

    @property
    def norm_weight(self) -> int:
        """w: E‖v‖² = w·‖x‖² (1 for x, r for y)."""
        return self.sketch.sketches if self.sketched else 1

    @property
    def vector_norm_sq(self) -> int:
        """T_v: the largest ‖v‖² accepted by the norm check (T, or ⌈r·(1 + ε)·T⌉ for y)."""
        if not self.sketched:
            return self.norm_sq
        return math.ceil(self.norm_weight * (1 + self.sketch.slack) * self.norm_sq)

    @property
    def vector_tolerance(self) -> int:
        """tol_v: the largest honest |w·N² − ‖v‖²| (tol, or r·tol + ⌈ε·r·T⌉ for y)."""
        if not self.sketched:
            return self.tolerance
        return self.norm_weight * self.tolerance + math.ceil(self.sketch.slack * self.norm_weight * self.norm_sq)

    @property
    def coordinate(self) -> int:
        """A = ⌊C·2^f + ½⌋: the largest honest |x_i|, N and δ (encoded)."""
        return max(int(math.floor(self.max_norm * 2**self.precision_bits + 0.5)), 8)

    @property
    def bits(self) -> int:
        """b with A < 2^b."""
        return self.coordinate.bit_length()

    @property
    def norm_sq(self) -> int:
        """T = ⌈(C·2^f + √m/2)²⌉: the largest honest ‖x‖²."""
        return math.ceil((self.max_norm * 2**self.precision_bits + math.sqrt(self.num_params) / 2) ** 2)

    @property
    def tolerance(self) -> int:
        """tol = ⌈D·(2√T + D)⌉, D = √m/2 + 2: the largest honest |N² − ‖x‖²|."""
        d = math.sqrt(self.num_params) / 2 + 2
        return math.ceil(d * (2 * math.sqrt(self.norm_sq) + d))


@dataclass(frozen=True)
class HeldInput:
    """This party's shares of one client's upload."""

    gradient: np.ndarray  #: int64 (m,)
    norm: int  #: [N]_p
    delta: int  #: [δ]_p


@dataclass(frozen=True)
class Verdict:
    failed: tuple[str, ...]  #: the checks (of CHECKS) that refused the upload

    @property
    def accepted(self) -> bool:
        return not self.failed

    def reason(self) -> str:
        if not self.failed:
            return "accepted"
        return "refused by the upload check: " + "; ".join(REASONS[c] for c in self.failed)


REASONS = {
    "range": "a coordinate is outside the range the norm bound allows",
    "norm": "the gradient's L2 norm is above the operator's bound ([validation] max_norm)",
    "reported_norm": "the reported norm does not match the gradient's norm",
    "delta": "the reported threshold delta is outside [0, max_norm]",
}


@dataclass(frozen=True)
class Window:
    """W(2^j·v + offset, k): honest 2^j·v + offset ∈ [0, 2^k)."""

    scale: int
    offset: int
    k: int


def window_for(limit: int) -> Window:
    """The window of a value honest in [0, limit]: k = bitlength(limit), scaled up to K if smaller."""
    p = limit.bit_length()
    return Window(0, 0, p) if p >= K else Window(K - p, 0, K)


def coarse() -> Window:
    return Window(0, OFFSET, K)


def fine(bits: int) -> Window:
    """|v| < 2^bits honest → 2^(K−1−bits)·v + 2^(K−1) ∈ [0, 2^K)."""
    return Window(K - 1 - bits, OFFSET, K)


def unsigned_fine(bits: int) -> Window:
    """0 ≤ v < 2^bits honest → 2^(K−bits)·v ∈ [0, 2^K)."""
    return Window(K - bits, 0, K)


class Stream:
    """Public randomness of one check (masks ρ, fold weights r): AES-256-CTR keyed by
    HMAC-SHA256(seed, label), through `mpc.masks.labelled_words`."""

    def __init__(self, seed: bytes, reshare: bool) -> None:
        if len(seed) != SEED_BYTES:
            raise ValueError(f"a check seed has {SEED_BYTES} bytes, got {len(seed)}")
        self._seed = seed
        self.reshare = reshare

    def mask(self, label: str, count: int) -> np.ndarray | None:
        """ρ of a window (only when re-sharing: module doc, step 1)."""
        return self.words("rho:" + label, count) if self.reshare else None

    def words(self, label: str, count: int) -> np.ndarray:
        return labelled_words(self._seed, label.encode(), count)


def client_seed(batch_seed: bytes, client: str) -> bytes:
    """The seed of one client's check within a batch: HMAC-SHA256(batch seed, client id)."""
    return hmac.new(batch_seed, b"client:" + client.encode(), hashlib.sha256).digest()


def _wrap(fn: Callable[[], np.ndarray]) -> np.ndarray:
    with np.errstate(over="ignore"):
        return fn()


def shifted_part(party: int, share: np.ndarray, window: Window, rho: np.ndarray | None) -> np.ndarray:
    """u_p of W (module doc, steps 1–2) for this party's share of v (offset added by party 0)."""
    with np.errstate(over="ignore"):
        v = np.asarray(share, dtype=np.int64) << np.int64(window.scale)  # a new array
        if party == 0:
            v += np.int64(window.offset)
            if rho is not None:
                v += rho
        elif rho is None:
            np.negative(v, out=v)
        else:
            np.subtract(rho, v, out=v)  # = −(v_1 − ρ)
        u = v.view(np.uint64)
        u >>= np.uint64(window.k)  # below 2^(64−k) ≤ 2^31: the same value read as int64
        out = u.view(np.int64)
        return out if party == 0 else np.negative(out, out=out)


def row_dots(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(Σ_l a_rl·b_rl)_r in Z_2^64 (int64 products and sums wrap)."""
    return np.einsum("...l,...l->...", a, b)


def local_term(u: np.ndarray) -> np.ndarray:
    """u_p² − u_p: this party's part of t = h(h − 1), exact for |u_p| < 2^31."""
    return _wrap(lambda: u * u - u)


@dataclass(frozen=True)
class Drawn:
    """This party's dealer correlation of one attempt over n items (one `private_dot`
    request): masks and product shares of the 3n vector rows and of the 7n scalar rows
    (5n in step 0, 2n in step 1)."""

    vectors: tuple[np.ndarray, np.ndarray]  #: masks (3n, m), shares (3n,)
    scalars: tuple[np.ndarray, np.ndarray]  #: masks (7n, 1), shares (7n,)

    @classmethod
    def fetch(cls, correlation: Correlation, items: int, length: int) -> Drawn:
        (vm, vg), (sm, sg) = correlation.private_dots([(3 * items, length), (7 * items, 1)])
        return cls((vm, vg), (sm, sg))

    def vector_rows(self, part: int, items: int) -> tuple[np.ndarray, np.ndarray]:
        """Masks and shares of the vector rows of `part` (0, 1: the range windows; 2: x)."""
        rows = slice(part * items, (part + 1) * items)
        return self.vectors[0][rows], self.vectors[1][rows]

    def scalar_rows(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        return self.scalars[0][start:stop], self.scalars[1][start:stop]


def private_products(
    party: int, groups: list[np.ndarray], drawn: list[tuple[np.ndarray, np.ndarray]], step: int, exchange: Exchange
) -> list[np.ndarray]:
    """This party's shares of the row-wise products Σ_l X_rl·Y_rl of each group (R, L), where
    party 0 holds X and party 1 holds Y, with the masks and product shares `drawn` for each
    group (module doc, step 3): one exchange for all groups."""
    masked, at = np.empty(sum(g.size for g in groups), dtype=np.int64), 0
    for g, (masks, _) in zip(groups, drawn, strict=True):
        np.subtract(g, masks, out=masked[at : at + g.size].reshape(g.shape))
        at += g.size
    theirs = exchange(step, masked)
    if theirs.shape != masked.shape:
        raise ValueError(f"check step {step}: the other party sent {theirs.size} words, expected {masked.size}")
    out, at = [], 0
    for g, (masks, gamma) in zip(groups, drawn, strict=True):
        other = theirs[at : at + g.size].reshape(g.shape)
        at += g.size
        known = masks if party == 0 else g  # α·(Y − β) for party 0, (X − α)·Y for party 1
        out.append(_wrap(lambda known=known, other=other, gamma=gamma: row_dots(known, other) + gamma))
    return out


def _scalars(values: list[int]) -> np.ndarray:
    """Python integers as ring elements (reduced mod 2^64 into the signed int64 range)."""
    return np.array([(int(v) + 2**63) % 2**64 - 2**63 for v in values], dtype=np.int64)


def _rows(streams: list[Stream], draw: Callable[[Stream], np.ndarray | None]) -> np.ndarray | None:
    """One row per item of a per-item stream draw (None when the attempt does not re-share)."""
    rows = [draw(s) for s in streams]
    return None if rows[0] is None else np.stack(rows)


def _windows(party: int, values: np.ndarray, windows: tuple[Window, ...], rho: np.ndarray | None) -> np.ndarray:
    """u_p of column j of `values` (n, w) under windows[j]; rho (n, w) or None."""
    return np.stack(
        [shifted_part(party, values[:, j], w, None if rho is None else rho[:, j]) for j, w in enumerate(windows)],
        axis=1,
    )


def _first_step(party: int, held: list[HeldInput], bounds: CheckBounds, streams: list[Stream], step, exchange, fetched):
    """Step 0 for all n items at once: the two range windows (folded), the N and δ windows,
    S = ‖x‖² and N²; per item (z_range, z_N, z_δ, S, N²), each of shape (n,). The local
    shifts run while the dealer's correlation is still on its way (`fetched()` waits for it)."""
    m, n = bounds.dim, len(held)
    x = np.stack([h.gradient for h in held])
    windows = (coarse(), fine(bounds.vector_bits))
    folds = [np.stack([s.words(f"fold:range:{i}", m) for s in streams]) for i in range(2)]
    parts = [
        shifted_part(party, x, w, _rows(streams, lambda s, i=i: s.mask(f"range:{i}", m))) for i, w in enumerate(windows)
    ]
    scalar_windows = (coarse(), unsigned_fine(bounds.bits), coarse(), unsigned_fine(bounds.bits))
    own = _scalars([h.norm for h in held])
    delta = _scalars([h.delta for h in held])
    scalar_parts = _windows(
        party,
        np.stack([own, own, delta, delta], axis=1),
        scalar_windows,
        _rows(streams, lambda s: s.mask("scalars", 4)),
    )
    with np.errstate(over="ignore"):
        vec_rows = [f * u for f, u in zip(folds, parts, strict=True)] if party == 0 else parts
        scalars = np.concatenate([scalar_parts, own[:, None]], axis=1)
        *cross_v, cross_s = private_products(
            party,
            [*vec_rows, x, scalars.reshape(5 * n, 1)],
            [*(fetched().vector_rows(p, n) for p in range(3)), fetched().scalar_rows(0, 5 * n)],
            step,
            exchange,
        )
        cross_s = cross_s.reshape(n, 5)
        z_range = sum(row_dots(f, local_term(u)) for f, u in zip(folds, parts, strict=True)) + 2 * (
            cross_v[0] + cross_v[1]
        )
        t = local_term(scalar_parts) + 2 * cross_s[:, :4]
        s = row_dots(x, x) + 2 * cross_v[2]
        nn = own * own + 2 * cross_s[:, 4]
        return z_range, t[:, 0] + t[:, 1], t[:, 2] + t[:, 3], s, nn


def _second_step(party: int, bounds: CheckBounds, streams: list[Stream], s, nn, step: int, exchange, drawn):
    """Step 1 for all n items: the windows on T_v − S (norm bound) and w·N² − S + tol_v
    (reported norm); per item (t_norm, t_reported)."""
    n, t_bound, tol, w = len(s), bounds.vector_norm_sq, bounds.vector_tolerance, bounds.norm_weight
    lead = party == 0
    with np.errstate(over="ignore"):
        values = np.stack([np.int64(t_bound if lead else 0) - s, w * nn - s + np.int64(tol if lead else 0)], axis=1)
    windows = (window_for(t_bound), window_for(2 * tol))
    parts = _windows(party, values, windows, _rows(streams, lambda st: st.mask("norms", 2)))
    (cross,) = private_products(party, [parts.reshape(2 * n, 1)], [drawn.scalar_rows(5 * n, 7 * n)], step, exchange)
    t = _wrap(lambda: local_term(parts) + 2 * cross.reshape(n, 2))
    return t[:, 0], t[:, 1]


def _attempt(
    party: int,
    prepare: Callable[[], list[HeldInput]],
    items: int,
    bounds: CheckBounds,
    streams,
    first_step: int,
    exchange,
    correlation,
):
    """One attempt over `items` items: steps 3a, 3a+1, 3a+2; one verdict per item. The dealer
    request runs on a thread of its own, beside the local work of `prepare` (the checked
    inputs: `checked_inputs`) and of step 0."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="check-dealer") as pool:
        drawn = pool.submit(Drawn.fetch, correlation, items, bounds.dim)
        held = prepare()
        z_range, z_reported, z_delta, s, nn = _first_step(
            party, held, bounds, streams, first_step, exchange, drawn.result
        )
    t_norm, t_reported = _second_step(party, bounds, streams, s, nn, first_step + 1, exchange, drawn.result())
    with np.errstate(over="ignore"):
        mine = np.stack([z_range, t_norm, z_reported + t_reported, z_delta], axis=1).reshape(-1)
        theirs = exchange(first_step + 2, mine)
        if theirs.shape != mine.shape:
            raise ValueError(
                f"check step {first_step + 2}: the other party sent {theirs.size} words, expected {mine.size}"
            )
        total = (mine + theirs).reshape(-1, len(CHECKS))
    return [Verdict(tuple(c for c, z in zip(CHECKS, row, strict=True) if z != 0)) for row in total]


def retry_seed(seed: bytes, attempt: int) -> bytes:
    return hmac.new(seed, b"attempt:%d" % attempt, hashlib.sha256).digest()


def _stream(seed: bytes, attempt: int) -> Stream:
    return Stream(seed, False) if attempt == 0 else Stream(retry_seed(seed, attempt), True)


def check_batch(
    party: int,
    held: list[HeldInput],
    bounds: CheckBounds,
    seeds: list[bytes],
    exchange: Exchange,
    correlation: Correlation,
) -> list[Verdict]:
    """The verdict on each item (module doc, "Batches"); both parties call it with the same
    seeds (one per item) and bounds. The items refused by attempt a are checked again, together,
    under attempt a + 1's seeds; steps 3a, 3a+1, 3a+2 belong to attempt a."""
    if party not in (0, 1):
        raise ValueError(f"party is 0 or 1, got {party}")
    if not held or len(held) != len(seeds):
        raise ValueError(f"a batch checks at least one item with one seed each, got {len(held)} and {len(seeds)}")
    for h in held:
        grad = np.asarray(h.gradient)
        if grad.dtype != np.int64 or grad.shape != (bounds.num_params,):
            raise ValueError(
                f"a gradient share is int64 of shape ({bounds.num_params},), got {grad.dtype} {grad.shape}"
            )
    verdicts = [Verdict(CHECKS)] * len(held)
    pending = list(range(len(held)))
    for attempt in range(ATTEMPTS):
        streams = [_stream(seeds[i], attempt) for i in pending]
        found = _attempt(
            party,
            lambda pending=pending, attempt=attempt: checked_inputs([held[i] for i in pending], bounds, seeds, attempt),
            len(pending),
            bounds,
            streams,
            3 * attempt,
            exchange,
            correlation,
        )
        for i, verdict in zip(pending, found, strict=True):
            verdicts[i] = verdict
        pending = [i for i in pending if not verdicts[i].accepted]
        if not pending:
            break
    return verdicts


def batch_sketch(seeds: list[bytes], attempt: int, bounds: CheckBounds) -> CountSketch:
    """The sketch every item of a batch is checked under in `attempt` (module doc, "Sketched
    check"): seeded by HMAC-SHA256 over all the batch's item seeds, so both parties draw the
    same one and a second attempt draws a fresh one."""
    key = hmac.new(b"starfish-check-sketch:%d" % attempt, b"".join(seeds), hashlib.sha256).digest()
    return CountSketch.draw(key, bounds.num_params, bounds.sketch.sketches, bounds.sketch.buckets)


def checked_inputs(held: list[HeldInput], bounds: CheckBounds, seeds: list[bytes], attempt: int) -> list[HeldInput]:
    """What an attempt checks: the shares as held, or (`bounds.sketched`) each share's sketch
    under `batch_sketch` — local and linear, no exchange."""
    if not bounds.sketched:
        return held
    sketch = batch_sketch(seeds, attempt, bounds)
    return [HeldInput(sketch.apply(np.asarray(h.gradient)), h.norm, h.delta) for h in held]


def batch_sizes(items: int, bounds: CheckBounds) -> list[int]:
    """How a batch of `items` is cut into vectorised checks: as many items per check as keep
    its step-0 vector (3d + 5 words per item) and its held gradients (m words per item) within
    `MAX_STEP_WORDS` (at least one)."""
    per = max(1, MAX_STEP_WORDS // max(3 * bounds.dim + 5, bounds.num_params))
    return [min(per, items - start) for start in range(0, items, per)]


def plain_check(
    gradient: np.ndarray, norm: int, delta: int, bounds: CheckBounds, sketch: CountSketch | None = None
) -> Verdict:
    """The verdict on cleartext encodings (centred integers): each check's accepting region
    (module doc), on x or (`bounds.sketched`) on y = `sketch`·x in Z_2^64. `check_batch` returns
    the same verdict outside each check's random band, attempt a using `batch_sketch(…, a, …)`."""
    v = np.asarray(gradient, dtype=np.int64)
    if bounds.sketched:
        if sketch is None:
            raise ValueError("a sketched check needs the sketch it ran under (batch_sketch)")
        v = sketch.apply(v)
    x = [int(c) for c in v]
    bound, vector_bound = 1 << bounds.bits, 1 << bounds.vector_bits
    s = sum(c * c for c in x)
    failed = []
    if any(not -vector_bound <= c < vector_bound for c in x):
        failed.append("range")
    if s > bounds.vector_norm_sq:
        failed.append("norm")
    if not (0 <= norm < bound and abs(bounds.norm_weight * norm * norm - s) <= bounds.vector_tolerance):
        failed.append("reported_norm")
    if not 0 <= delta < bound:
        failed.append("delta")
    return Verdict(tuple(failed))
