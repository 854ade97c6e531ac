"""A batch larger than one step message (`batch_sizes`) runs as several vectorised checks,
part c on the step numbers 6c..6c+5 (server.upload_check.run_parts), each item keeping its
own verdict."""

from __future__ import annotations

import secrets
import threading

import numpy as np
import pytest

from mpc.input_check import CheckBounds, batch_sizes
from server.upload_check import run_parts

from helpers.input_check_pair import PairDealer, Pipe, Upload, honest, ring

F = 16


def test_a_batch_cut_into_parts_uses_six_step_numbers_per_part_and_keeps_per_item_verdicts(monkeypatch) -> None:
    m = 40
    monkeypatch.setattr("mpc.input_check.MAX_STEP_WORDS", 2 * (3 * m + 5))  # two items per part
    bounds = CheckBounds.make(m, F, 1.0)
    assert batch_sizes(5, bounds) == [2, 2, 1]
    rng = np.random.default_rng(5)
    uploads = [honest(rng.normal(size=m) * 0.01, F, 0.001) for _ in range(5)]
    bad = uploads[2].gradient.copy()
    bad[0] = 2**40
    uploads[2] = Upload(bad, ring(-1), uploads[2].delta)  # refused in part 1: its re-check uses steps 9–11
    held = [u.shares() for u in uploads]
    seeds = [secrets.token_bytes(32) for _ in uploads]
    dealer, pipe, done, result = PairDealer(), Pipe(), [], {}

    def party1() -> None:
        result[1] = run_parts(1, [h[1] for h in held], bounds, seeds, pipe.end(1), dealer.correlation(1), done.append)

    thread = threading.Thread(target=party1, daemon=True)
    thread.start()
    verdicts = run_parts(0, [h[0] for h in held], bounds, seeds, pipe.end(0), dealer.correlation(0))
    thread.join(timeout=60)
    assert verdicts == result[1] and done == [0, 1, 2]
    assert [i for i, v in enumerate(verdicts) if not v.accepted] == [2]
    assert {"range", "reported_norm"} <= set(verdicts[2].failed)
    assert [step for step, _ in pipe.sent[0]] == [0, 1, 2, 6, 7, 8, 9, 10, 11, 12, 13, 14]


@pytest.mark.parametrize(("items", "m", "sizes"), [(1, 10**7, [1]), (3, 10, [3]), (0, 10, []), (40, 582_026, [28, 12])])
def test_batch_sizes_keep_at_least_one_item_per_part(items, m, sizes) -> None:
    """A sketched check's step vector is 3d + 5 words, but the held gradients (m words each)
    bound a part too."""
    assert batch_sizes(items, CheckBounds.make(m, F, 1.0)) == sizes
