"""The packed carry tree (`mpc.plane.sign_bit`): its bit is msb(x_0 + x_1) for any shares.

Both parties run in threads of this process with an in-process dealer (uniform triples and
bits, split in XOR and additive shares) and a lock-step XOR opening; the two-party tests
(`test_protocols_mpc.py`) run the same code through the dealer service and the TLS plane.
"""

from __future__ import annotations

import threading

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from mpc.plane import sign_bit

INT64 = st.integers(-(2**63), 2**63 - 1)
EDGES = [0, 1, -1, 2**62, -(2**62), 2**63 - 1, -(2**63)]


class _Pair:
    """What the two parties share in a run: the dealer's draws and the opening's exchange."""

    def __init__(self, seed: int) -> None:
        self.gen = torch.Generator().manual_seed(seed)
        self.draws: list[dict] = [{}, {}]
        self.barrier = threading.Barrier(2)
        self.posted: list[list[torch.Tensor] | None] = [None, None]
        self.calls = [0, 0]
        self.lock = threading.Lock()
        self.opened_bytes = [0, 0]

    def _draw(self, rank: int, make) -> tuple:
        with self.lock:
            k = self.calls[rank]
            self.calls[rank] += 1
            if k not in self.draws[1 - rank]:
                self.draws[rank][k] = make()
                return self.draws[rank][k][rank]
            return self.draws[1 - rank].pop(k)[rank]

    def _ring(self, shape) -> torch.Tensor:
        return torch.randint(-(2**63), 2**63 - 1, tuple(shape), dtype=torch.int64, generator=self.gen)

    def triple(self, rank: int):
        def make_for(shape, other):
            assert shape == other

            def make():
                a0, a1, b0, b1, c1 = (self._ring(shape) for _ in range(5))
                c0 = ((a0 ^ a1) & (b0 ^ b1)) ^ c1
                return (a0, b0, c0), (a1, b1, c1)

            return self._draw(rank, make)

        return make_for

    def bits(self, rank: int):
        def draw(size):
            (n,) = size

            def make():
                r0 = torch.randint(0, 2, (n,), generator=self.gen, dtype=torch.int64)
                r1 = torch.randint(0, 2, (n,), generator=self.gen, dtype=torch.int64)
                add1 = self._ring((n,))
                return (r0, (r0 ^ r1) - add1), (r1, add1)

            return self._draw(rank, make)

        return draw

    def open_xor(self, rank: int):
        def exchange(shares: list[torch.Tensor]) -> list[torch.Tensor]:
            self.posted[rank] = shares
            self.opened_bytes[rank] += sum(t.numel() * 8 for t in shares)
            self.barrier.wait()
            theirs = self.posted[1 - rank]
            assert theirs is not None
            out = [m ^ t for m, t in zip(shares, theirs, strict=True)]
            self.barrier.wait()
            return out

        return exchange


def _run(x0: torch.Tensor, x1: torch.Tensor, seed: int = 0) -> tuple[torch.Tensor, _Pair]:
    pair = _Pair(seed)
    out: list[torch.Tensor | None] = [None, None]

    def party(rank: int, share: torch.Tensor) -> None:
        out[rank] = sign_bit.sign_bits(rank, share, pair.triple(rank), pair.bits(rank), pair.open_xor(rank))

    threads = [threading.Thread(target=party, args=(r, s)) for r, s in ((0, x0), (1, x1))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out[0] is not None and out[1] is not None
    return out[0] + out[1], pair


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(INT64, INT64), min_size=1, max_size=200), st.integers(0, 2**32))
@example([(a, b) for a in EDGES for b in EDGES], 0)
def test_sign_bit_is_msb_of_the_sum(pairs, seed):
    x0 = torch.tensor([a for a, _ in pairs], dtype=torch.int64)
    x1 = torch.tensor([b for _, b in pairs], dtype=torch.int64)
    got, _ = _run(x0, x1, seed)
    assert torch.equal(got, ((x0 + x1) < 0).to(torch.int64))


@pytest.mark.parametrize("n", [4096, 9])
def test_opened_bytes_per_value(n):
    """54 bytes per value and direction in the tree, 1/8 for the sign bit (module doc); a
    level's bytes and the sign bits are padded to whole words, nothing more."""
    x0 = torch.randint(-(2**63), 2**63 - 1, (n,), dtype=torch.int64)
    x1 = torch.randint(-(2**63), 2**63 - 1, (n,), dtype=torch.int64)
    got, pair = _run(x0, x1)
    assert torch.equal(got, ((x0 + x1) < 0).to(torch.int64))
    # per level: values per operand (a multiple of n) and bytes per value; two operands each
    levels = [(n, 8), (2 * n, 4), (2 * n, 2), (2 * n, 1), (2 * n, 1), (2 * n, 1), (n, 1)]
    tree = sum(2 * 8 * -(-count * size // 8) for count, size in levels)
    assert pair.opened_bytes == [tree + 8 * -(-n // 64)] * 2
    assert n % 64 or tree == 54 * n
