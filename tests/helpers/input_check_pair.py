"""Both parties of `mpc.input_check` in one process: party 1 on a thread, messages
through queues, correlated randomness from the real `private_dot` dealer kind (two PRG keys,
the dealer's streams advanced by party 0's fetches exactly as the dealer service does)."""

from __future__ import annotations

import queue
import secrets
import threading
from dataclasses import dataclass, field

import numpy as np

from mpc.fixedpoint import encode
from mpc.input_check import CheckBounds, HeldInput, Verdict, check_batch
from mpc.plane.dealer_ops import request
from mpc.plane.prg import Prg, new_key


class PairDealer:
    """The dealer's side (both keys) and each party's `Correlation`."""

    def __init__(self) -> None:
        self.keys = (new_key(), new_key())
        self._dealer = (Prg(self.keys[0]), Prg(self.keys[1]))
        self.fetched = 0  #: words of V_0 sent to party 0 (offline traffic)
        self.requests = 0  #: requests party 0 made

    def fetch(self, req):
        op, _ = request(req.kind, req.shapes)
        share = op.dealer_share0(*self._dealer, req)
        self.fetched += share.numel()
        self.requests += 1
        return share

    def correlation(self, rank: int) -> PartyCorrelation:
        return PartyCorrelation(Prg(self.keys[rank]), rank, self.fetch)


@dataclass
class PartyCorrelation:
    prg: Prg
    rank: int
    fetch: object

    def private_dots(self, shapes: list[tuple[int, int]]) -> list[tuple[np.ndarray, np.ndarray]]:
        op, req = request("private_dot", [list(s) for s in shapes])
        local, share = op.party_shares(self.prg, self.rank, req, self.fetch)
        cuts = np.cumsum([rows for rows, _ in shapes])[:-1]
        return [(m.numpy(), g) for m, g in zip(local, np.split(share.numpy(), cuts), strict=True)]


@dataclass
class Pipe:
    """Two queues; `end(p)` is party p's `Exchange`; every message is recorded."""

    boxes: tuple = field(default_factory=lambda: (queue.Queue(), queue.Queue()))
    sent: list = field(default_factory=lambda: [[], []])

    def end(self, party: int):
        def exchange(step: int, mine: np.ndarray) -> np.ndarray:
            self.sent[party].append((step, mine.copy()))
            self.boxes[1 - party].put((step, mine.copy()))
            got_step, theirs = self.boxes[party].get(timeout=120)
            assert got_step == step, f"party {party} at step {step} got step {got_step}"
            return theirs

        return exchange


@dataclass(frozen=True)
class Upload:
    """Cleartext encodings of one client's upload (centred integers)."""

    gradient: np.ndarray  #: int64 encodings x
    norm: int
    delta: int

    def shares(self) -> tuple[HeldInput, HeldInput]:
        r = np.frombuffer(secrets.token_bytes(8 * self.gradient.size), dtype="<i8").astype(np.int64)
        rn, rd = (int.from_bytes(secrets.token_bytes(8), "little", signed=True) for _ in range(2))
        with np.errstate(over="ignore"):
            other = self.gradient - r
        return (
            HeldInput(r, rn, rd),
            HeldInput(other, ring(self.norm - rn), ring(self.delta - rd)),
        )


def ring(v: int) -> int:
    return (int(v) + 2**63) % 2**64 - 2**63


def honest(g: np.ndarray, precision: int, delta: float) -> Upload:
    """What the SDK uploads for gradient g: x = encode(g), N = encode(‖g‖), δ encoded."""
    norm = float(np.sqrt(np.sum(np.asarray(g, dtype=np.float64) ** 2)))
    return Upload(
        encode(np.asarray(g, dtype=np.float64), precision),
        int(encode(np.array([norm]), precision)[0]),
        int(encode(np.array([delta]), precision)[0]),
    )


def run_batch(
    held: list[tuple[HeldInput, HeldInput]],
    bounds: CheckBounds,
    pipe: Pipe | None = None,
    seeds: list[bytes] | None = None,
) -> tuple[list[Verdict], list[Verdict], PairDealer]:
    """Both parties' verdicts on a batch of items (given shares; fresh seeds unless given), and
    the dealer used."""
    dealer, pipe = PairDealer(), pipe or Pipe()
    seeds = seeds or [secrets.token_bytes(32) for _ in held]
    result: dict[int, list[Verdict] | BaseException] = {}

    def party1() -> None:
        try:
            result[1] = check_batch(1, [h[1] for h in held], bounds, seeds, pipe.end(1), dealer.correlation(1))
        except BaseException as exc:  # surfaced below
            result[1] = exc

    thread = threading.Thread(target=party1, daemon=True)
    thread.start()
    verdicts0 = check_batch(0, [h[0] for h in held], bounds, seeds, pipe.end(0), dealer.correlation(0))
    thread.join(timeout=120)
    if isinstance(result.get(1), BaseException):
        raise result[1]
    return verdicts0, result[1], dealer


def run_held(
    held: tuple[HeldInput, HeldInput], bounds: CheckBounds, pipe: Pipe | None = None
) -> tuple[Verdict, Verdict, PairDealer]:
    """Both parties' verdicts on the given shares of one item, and the dealer used."""
    (v0,), (v1,), dealer = run_batch([held], bounds, pipe)
    return v0, v1, dealer


def run_pair(upload: Upload, bounds: CheckBounds, pipe: Pipe | None = None) -> tuple[Verdict, Verdict, PairDealer]:
    """Both parties' verdicts on `upload`, shared afresh."""
    return run_held(upload.shares(), bounds, pipe)
