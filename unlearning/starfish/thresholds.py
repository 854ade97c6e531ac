"""Threshold determination (Starfish §IV-C1, Algorithm 4 Stage II): [δ^j] = SecMax_i [δ_i^j].

Each remaining client j reported, with every upload of round i, a threshold δ_i^j such that
a fraction α (tolerance rate) of its |g_i^j| coordinates exceed it. Its checking threshold is
the maximum over the stored rounds it took part in, computed with SecMax (a tree of SecGE +
SecSel) so no δ_i^j is revealed. Clients with the same number of rounds are batched.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from mpc.backend import Backend, Secret
from unlearning.history import SharedHistory


def client_rounds(history: SharedHistory, clients: Sequence[str]) -> dict[str, list[int]]:
    """Public: the stored rounds each client took part in (ascending)."""
    wanted = set(clients)
    rounds: dict[str, list[int]] = {c: [] for c in clients}
    for i in range(1, history.num_rounds + 1):
        for c in history.round_info(i).clients:
            if c in wanted:
                rounds[c].append(i)
    return rounds


def determine_thresholds(backend: Backend, history: SharedHistory, clients: Sequence[str]) -> Secret:
    """[δ^j] for `clients` (in that order), shape (len(clients),)."""
    rounds = client_rounds(history, clients)
    empty = [c for c in clients if not rounds[c]]
    if empty:
        raise ValueError(f"clients {empty} have no stored round: no threshold can be determined")
    groups: dict[int, list[str]] = defaultdict(list)
    for c in clients:
        groups[len(rounds[c])].append(c)
    result: dict[str, Secret] = {}
    for members in groups.values():
        rows = []
        for c in members:
            per_round = [history.thresholds(backend, i, [c]) for i in rounds[c]]
            rows.append(backend.reshape(backend.cat(per_round, dim=0), (1, len(per_round))))
        maxima = backend.reshape(backend.max(backend.cat(rows, dim=0), dim=1), (len(members),))
        for idx, c in enumerate(members):
            result[c] = backend.index(maxima, slice(idx, idx + 1))
    return backend.cat([result[c] for c in clients], dim=0)
