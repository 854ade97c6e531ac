"""Federated evaluation answers: secret-shared integer counts, their exact range check and
their sum in 2PC, opening only verdicts and the sums (docs/PRIVACY.md, "Federated evaluation").

A remaining client evaluates the unlearned model M̂ and the replaced model M_T on its own
held-out data and answers with six counts (`COUNTS`):

    c = (correct(M̂), correct(M_T), total, probe_hits(M̂), probe_hits(M_T), probe_total).

Well-formed means 0 ≤ each count ≤ its total ≤ N (N = `max_eval_samples`, the operator's
public bound). That is ten non-negative **gaps** g = G·c + K (`GAPS`: correct(M̂),
total − correct(M̂), …, N − total, …), each below 2^B with B = bitlength(N). The answer is
the ring vector a = (c, bits) ∈ Z_2^64^(6 + 10·B): the counts, then each gap's B bits
(least significant first), shared additively: a = a_0 + a_1 with a_0 uniform (OS CSPRNG).

**Check** (exact: no mask decides a verdict). For every bit share b = b_0 + b_1:
t = b(b − 1) = (b_0² − b_0) + (b_1² − b_1) + 2·b_0·b_1 over Z_2^64, with b_0·b_1 a private
product of the dealer's `private_dot` correlation (party 0 sends b_0 − α, party 1 sends
b_1 − β; b_0·b_1 = α·(b_1 − β) + [αβ]_0 + (b_0 − α)·b_1 + [αβ]_1). Since b and b − 1 have
different parity, t = 0 mod 2^64 iff b ∈ {0, 1}. For every gap,
z = Σ_i 2^i·bit_i − (G·c + K) is linear (each party computes its share; K is added by party 0).
Both t and z are opened; the answer is accepted iff all are 0. Then each gap's integer
value is Σ 2^i·bit_i ∈ [0, 2^B), and since total = correct + gap ∈ [0, 2^(B+1)) and
N − total ≡ a value in [0, 2^B), every count lies in [0, total] and total ≤ N — exactly,
for any shares the client chose. An accepted answer opens only zeros (each opened share is
the opened value minus the other party's own share); a refused one opens t and z, functions
of its own malformed input.

**Sum**: each party adds its shares of the accepted answers' counts (no communication) and
the two sums are exchanged only when the caller's release rule allows it (the cohort rule).
Two exchanges for the check of a whole batch, one for the reveal.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

COUNTS = ("correct_new", "correct_old", "total", "probe_new", "probe_old", "probe_total")
GAPS = (
    ("correct(M̂) ≥ 0", {"correct_new": 1}, 0),
    ("correct(M̂) ≤ total", {"total": 1, "correct_new": -1}, 0),
    ("correct(M_T) ≥ 0", {"correct_old": 1}, 0),
    ("correct(M_T) ≤ total", {"total": 1, "correct_old": -1}, 0),
    ("total ≤ max_eval_samples", {"total": -1}, 1),
    ("probe_hits(M̂) ≥ 0", {"probe_new": 1}, 0),
    ("probe_hits(M̂) ≤ probe_total", {"probe_total": 1, "probe_new": -1}, 0),
    ("probe_hits(M_T) ≥ 0", {"probe_old": 1}, 0),
    ("probe_hits(M_T) ≤ probe_total", {"probe_total": 1, "probe_old": -1}, 0),
    ("probe_total ≤ max_eval_samples", {"probe_total": -1}, 1),
)
"""(the statement, its coefficients over `COUNTS`, the multiple of N added): gap = G·c + K·N."""
MAX_BITS = 40
"""The largest B; N must stay below 2^40 so that a sum over many answers cannot wrap."""


class Exchange(Protocol):
    def __call__(self, step: int, mine: np.ndarray) -> np.ndarray:
        """Send this party's int64 vector of `step`; return the other party's vector of that step."""


class Correlation(Protocol):
    def private_dots(self, shapes: list[tuple[int, int]]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per block (rows, length): this party's masks (α or β) and its share of the row products."""


def bits_for(max_eval_samples: int) -> int:
    """B = bitlength(N): every gap of a well-formed answer is below 2^B. ValueError outside [1, 2^40)."""
    if not 1 <= max_eval_samples < 1 << MAX_BITS:
        raise ValueError(f"max_eval_samples must be in [1, 2^{MAX_BITS}), got {max_eval_samples}")
    return int(max_eval_samples).bit_length()


def answer_words(max_eval_samples: int) -> int:
    """Length of an answer vector: 6 counts and 10·B bits."""
    return len(COUNTS) + len(GAPS) * bits_for(max_eval_samples)


def _gap_matrix() -> tuple[np.ndarray, np.ndarray]:
    """G (10 × 6) and K (10,) of `GAPS`."""
    g = np.zeros((len(GAPS), len(COUNTS)), dtype=np.int64)
    k = np.zeros(len(GAPS), dtype=np.int64)
    for row, (_, coefficients, constant) in enumerate(GAPS):
        for name, c in coefficients.items():
            g[row, COUNTS.index(name)] = c
        k[row] = constant
    return g, k


def gaps(counts: np.ndarray, max_eval_samples: int) -> np.ndarray:
    """The ten gaps G·c + K·N of plain counts (int64)."""
    g, k = _gap_matrix()
    return g @ np.asarray(counts, dtype=np.int64) + k * int(max_eval_samples)


def problems(counts: np.ndarray, max_eval_samples: int) -> list[str]:
    """The statements of `GAPS` that plain counts break (empty: well-formed)."""
    return [GAPS[i][0] for i, v in enumerate(gaps(counts, max_eval_samples)) if v < 0]


def encode(counts: np.ndarray, max_eval_samples: int) -> np.ndarray:
    """The answer vector a = (c, bits of each gap) of well-formed counts; ValueError naming the
    broken statement otherwise."""
    counts = np.asarray(counts, dtype=np.int64).reshape(len(COUNTS))
    wrong = problems(counts, max_eval_samples)
    if wrong:
        raise ValueError(f"evaluation counts {counts.tolist()} are not well-formed: {'; '.join(wrong)}")
    b = bits_for(max_eval_samples)
    g = gaps(counts, max_eval_samples)
    bits = (g[:, None] >> np.arange(b, dtype=np.int64)[None, :]) & 1
    return np.concatenate([counts, bits.reshape(-1)])


def share(words: np.ndarray, rng: Callable[[int], bytes]) -> tuple[np.ndarray, np.ndarray]:
    """Additive shares over Z_2^64: a_0 uniform from `rng` (os.urandom), a_1 = a − a_0."""
    first = np.frombuffer(rng(8 * words.size), dtype="<i8").astype(np.int64)
    with np.errstate(over="ignore"):
        return first, (words.astype(np.int64) - first)


@dataclass(frozen=True)
class CountVerdict:
    """One answer's verdict: accepted, or the statements it broke (opened t or z nonzero)."""

    broken: tuple[str, ...]

    @property
    def accepted(self) -> bool:
        return not self.broken

    def reason(self) -> str:
        return "accepted" if self.accepted else "malformed evaluation counts: " + "; ".join(self.broken)


def _split(held: np.ndarray, max_eval_samples: int) -> tuple[np.ndarray, np.ndarray]:
    """(counts (n, 6), bits (n, 10, B)) of this party's answer shares (n, 6 + 10·B)."""
    b = bits_for(max_eval_samples)
    if held.ndim != 2 or held.shape[1] != answer_words(max_eval_samples):
        raise ValueError(f"evaluation shares of shape {held.shape}, expected (n, {answer_words(max_eval_samples)})")
    return held[:, : len(COUNTS)], held[:, len(COUNTS) :].reshape(len(held), len(GAPS), b)


def _bit_products(party: int, bits: np.ndarray, correlation: Correlation, exchange: Exchange) -> np.ndarray:
    """Step 0: this party's shares of b_0·b_1 for every bit (Beaver with a private_dot row each)."""
    flat = bits.reshape(-1, 1)
    half = flat.shape[0] // 2  # `private_dot` takes two blocks: the rows in two halves
    blocks = correlation.private_dots([(half, 1), (flat.shape[0] - half, 1)])
    masks = np.concatenate([m for m, _ in blocks])
    gamma = np.concatenate([g for _, g in blocks])
    with np.errstate(over="ignore"):
        theirs = exchange(0, (flat - masks).reshape(-1))
        if theirs.shape != (flat.shape[0],):
            raise ValueError(f"evaluation check step 0: {theirs.size} words from the other party, expected {flat.size}")
        known = masks.reshape(-1) if party == 0 else flat.reshape(-1)
        return (known * theirs + gamma.reshape(-1)).reshape(bits.shape)


def _openings(party: int, held: np.ndarray, max_eval_samples: int, correlation, exchange) -> np.ndarray:
    """This party's shares of every t (n, 10·B) and z (n, 10), side by side."""
    counts, bits = _split(held, max_eval_samples)
    cross = _bit_products(party, bits, correlation, exchange)
    g, k = _gap_matrix()
    powers = np.left_shift(np.int64(1), np.arange(bits.shape[2], dtype=np.int64))
    with np.errstate(over="ignore"):
        t = bits * bits - bits + 2 * cross
        z = bits @ powers - counts @ g.T - (k * int(max_eval_samples) if party == 0 else 0)
    return np.concatenate([t.reshape(len(held), -1), z], axis=1)


def check_answers(
    party: int, held: np.ndarray, max_eval_samples: int, correlation: Correlation, exchange: Exchange
) -> list[CountVerdict]:
    """Verdicts of n answers (`held`: this party's shares, (n, 6 + 10·B)), equal on both parties:
    steps 0 (masked bits) and 1 (t and z opened) of the module docstring."""
    if len(held) == 0:
        return []
    mine = _openings(party, np.asarray(held, dtype=np.int64), max_eval_samples, correlation, exchange)
    theirs = exchange(1, mine.reshape(-1))
    if theirs.shape != (mine.size,):
        raise ValueError(f"evaluation check step 1: {theirs.size} words from the other party, expected {mine.size}")
    with np.errstate(over="ignore"):
        opened = mine + theirs.reshape(mine.shape)
    b = bits_for(max_eval_samples)
    verdicts = []
    for row in opened:
        bad_bits = row[: len(GAPS) * b].reshape(len(GAPS), b).any(axis=1)
        bad_sums = row[len(GAPS) * b :] != 0
        verdicts.append(CountVerdict(tuple(GAPS[i][0] for i in range(len(GAPS)) if bad_bits[i] or bad_sums[i])))
    return verdicts


def share_of_sums(held: np.ndarray, verdicts: list[CountVerdict]) -> np.ndarray:
    """This party's share of Σ c over the accepted answers (6 words; no communication)."""
    held = np.asarray(held, dtype=np.int64)
    rows = [i for i, v in enumerate(verdicts) if v.accepted]
    with np.errstate(over="ignore"):
        return held[rows, : len(COUNTS)].sum(axis=0, dtype=np.int64) if rows else np.zeros(len(COUNTS), np.int64)


def reveal_sums(mine: np.ndarray, exchange: Exchange) -> dict[str, int]:
    """Step 2: exchange the sums' shares and open them (each a count sum, non-negative and
    below n·2^40 when every summed answer was accepted)."""
    theirs = exchange(2, np.asarray(mine, dtype=np.int64))
    if theirs.shape != (len(COUNTS),):
        raise ValueError(f"evaluation reveal: {theirs.size} words from the other party, expected {len(COUNTS)}")
    with np.errstate(over="ignore"):
        opened = mine + theirs
    return {name: int(v) for name, v in zip(COUNTS, opened, strict=True)}
