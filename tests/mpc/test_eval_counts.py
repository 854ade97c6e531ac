"""The federated evaluation's count check and sum (mpc.eval_counts) between two parties and
the dealer's `private_dot` kind: well-formed counts accepted opening only zeros, every
malformed answer refused whatever its shares, the same verdicts as the cleartext rule, and
the revealed sums equal to the plain sums of the accepted answers."""

from __future__ import annotations

import os
import threading

import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from mpc.eval_counts import (
    COUNTS,
    answer_words,
    check_answers,
    encode,
    problems,
    reveal_sums,
    share,
    share_of_sums,
)

from helpers.input_check_pair import PairDealer, Pipe

EXAMPLES = settings(max_examples=30, deadline=None)


@st.composite
def well_formed(draw, limit: int) -> np.ndarray:
    total = draw(st.integers(0, limit))
    probe_total = draw(st.integers(0, limit))
    return np.array(
        [
            draw(st.integers(0, total)),
            draw(st.integers(0, total)),
            total,
            draw(st.integers(0, probe_total)),
            draw(st.integers(0, probe_total)),
            probe_total,
        ],
        dtype=np.int64,
    )


def run_both(held: list[tuple[np.ndarray, np.ndarray]], limit: int, pipe: Pipe | None = None):
    """Both parties' verdicts and revealed sums over answers given as share pairs."""
    dealer, pipe = PairDealer(), pipe or Pipe()
    result: dict = {}

    def party(p: int) -> None:
        rows = np.stack([h[p] for h in held])
        try:
            verdicts = check_answers(p, rows, limit, dealer.correlation(p), pipe.end(p))
            result[p] = (verdicts, reveal_sums(share_of_sums(rows, verdicts), pipe.end(p)))
        except BaseException as exc:  # surfaced below
            result[p] = exc

    thread = threading.Thread(target=party, args=(1,), daemon=True)
    thread.start()
    party(0)
    thread.join(timeout=120)
    for p in (0, 1):
        if isinstance(result[p], BaseException):
            raise result[p]
    return result[0], result[1], pipe


@EXAMPLES
@given(st.integers(1, 5000), st.data())
def test_well_formed_counts_are_accepted_opening_only_zeros_and_summed_exactly(limit, data) -> None:
    answers = [data.draw(well_formed(limit)) for _ in range(data.draw(st.integers(1, 4)))]
    held = [share(encode(a, limit), os.urandom) for a in answers]
    (v0, sums0), (v1, sums1), pipe = run_both(held, limit)
    assert v0 == v1 and all(v.accepted for v in v0), v0
    assert sums0 == sums1 == dict(zip(COUNTS, np.sum(answers, axis=0).tolist(), strict=True))
    (step0, o0), (step1, o1) = pipe.sent[0][1], pipe.sent[1][1]
    assert step0 == step1 == 1
    with np.errstate(over="ignore"):
        assert not (o0 + o1).any(), "an accepted answer opens exactly zero for every t and z"


@EXAMPLES
@given(st.integers(1, 5000), st.data())
def test_malformed_counts_are_refused_whatever_the_shares_and_left_out_of_the_sum(limit, data) -> None:
    """A client that breaks a rule (count > total, total > N, a negative count, a 2^40 count)
    and then chooses every bit and share itself is still refused: no bit vector makes all
    t and z zero. The well-formed answers beside it are summed alone."""
    good = data.draw(well_formed(limit))
    bad = data.draw(well_formed(limit)).copy()
    which = data.draw(st.integers(0, len(COUNTS) - 1))
    bad[which] = data.draw(st.one_of(st.integers(-(2**40), 2**40), st.sampled_from([2**40, -1, limit + 1])))
    assume(problems(bad, limit))
    forged_gaps = np.array(data.draw(st.lists(st.integers(0, 2**62), min_size=10, max_size=10)), dtype=np.int64)
    b = (answer_words(limit) - len(COUNTS)) // 10
    bits = np.array(data.draw(st.lists(st.integers(-2, 3), min_size=10 * b, max_size=10 * b)), dtype=np.int64)
    use_forged = data.draw(st.booleans())
    words = np.concatenate([bad, bits if use_forged else (forged_gaps[:, None] >> np.arange(b) & 1).reshape(-1)])
    held = [share(encode(good, limit), os.urandom), share(words, os.urandom)]
    (v0, sums0), (v1, _), _ = run_both(held, limit)
    assert v0 == v1
    assert v0[0].accepted and not v0[1].accepted, v0
    assert "malformed evaluation counts" in v0[1].reason()
    assert sums0 == dict(zip(COUNTS, good.tolist(), strict=True))


@EXAMPLES
@given(st.integers(1, 5000), st.data())
def test_the_cleartext_rule_and_the_2pc_verdict_agree(limit, data) -> None:
    counts = np.array(data.draw(st.lists(st.integers(-3, limit + 3), min_size=6, max_size=6)), dtype=np.int64)
    wrong = problems(counts, limit)
    if wrong:
        try:
            encode(counts, limit)
        except ValueError as exc:
            assert wrong[0] in str(exc)
        else:
            raise AssertionError("encode accepted malformed counts")
    else:
        (v0, _), (v1, _), _ = run_both([share(encode(counts, limit), os.urandom)], limit)
        assert v0 == v1 and v0[0].accepted


def test_a_huge_share_in_one_count_is_refused_and_named() -> None:
    limit = 1000
    words = encode(np.array([5, 7, 10, 0, 0, 0]), limit)
    s0, s1 = share(words, os.urandom)
    s1 = s1.copy()
    s1[0] += 2**40  # the 2^40 share: correct(M̂) far beyond total
    (v0, sums), _, _ = run_both([(s0, s1)], limit)
    assert not v0[0].accepted
    assert "correct(M̂) ≤ total" in v0[0].reason()
    assert sums == dict.fromkeys(COUNTS, 0)
