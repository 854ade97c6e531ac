"""`StoreHistory`: the `SharedHistory` of a job, read from this party's durable store.

Public parts (models M_0..M_T, memberships, the weights w_j Stage I aggregated with — the
capped ones of unlearning.weight_cap —, the members' principals, η_l) come from the store's tables;
secret parts are this party's int64 shares of each upload ([g], [‖g‖], [δ]), wrapped by
`backend.load_shares` with no communication (the other party loads its own shares in the
same order). Erased clients are left out of every round's membership: their shares are gone.
A round without members (e.g. a model installed by an earlier unlearning job) has no clients.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from mpc.backend import Backend, Secret
from server.store import Store
from unlearning.history import RoundInfo, SharedHistory


class StoreHistory(SharedHistory):
    """Rounds 1..`base_round` of a party's store (T = base_round)."""

    def __init__(self, store: Store, base_round: int):
        if base_round < 1:
            raise ValueError("a job needs at least one stored round")
        self.store = store
        self.base_round = base_round
        self._models: dict[int, torch.Tensor] = {}
        self._infos: dict[int, RoundInfo] = {}

    @property
    def num_rounds(self) -> int:
        return self.base_round

    def model(self, i: int) -> torch.Tensor:
        if not 0 <= i <= self.base_round:
            raise IndexError(f"model index {i} outside 0..{self.base_round}")
        if i not in self._models:
            self._models[i] = torch.from_numpy(self.store.global_model(i).params.copy())
        return self._models[i]

    def round_info(self, i: int) -> RoundInfo:
        if not 1 <= i <= self.base_round:
            raise IndexError(f"round {i} outside 1..{self.base_round}")
        if i not in self._infos:
            weights = {c: w for c, w in self.store.round_weights(i).items() if not self.store.is_erased(c)}
            principals = {c: p for c, p in self.store.round_principals(i).items() if c in weights}
            rec = self.store.round_record(i)
            lr = rec.lr if rec is not None else self.store.global_model(i).lr
            self._infos[i] = RoundInfo(
                index=i, clients=tuple(sorted(weights)), n_samples=weights, lr=float(lr), principals=principals
            )
        return self._infos[i]

    def _members(self, i: int, clients: Sequence[str]) -> None:
        members = set(self.round_info(i).clients)
        missing = [c for c in clients if c not in members]
        if missing:
            raise KeyError(f"round {i} has no stored upload for clients {missing}")

    def gradients(self, backend: Backend, i: int, clients: Sequence[str]) -> Secret:
        self._members(i, clients)
        return backend.stack([backend.load_shares(self.store.load_share(i, c).gradient) for c in clients])

    def _scalars(self, backend: Backend, i: int, clients: Sequence[str], part: int) -> Secret:
        """[‖g‖] (part 0) or [δ] (part 1) of each client's round-i upload, without its gradient share."""
        self._members(i, clients)
        return backend.cat([backend.load_shares(self.store.load_scalar_shares(i, c)[part]) for c in clients])

    def norms(self, backend: Backend, i: int, clients: Sequence[str]) -> Secret:
        return self._scalars(backend, i, clients, 0)

    def thresholds(self, backend: Backend, i: int, clients: Sequence[str]) -> Secret:
        return self._scalars(backend, i, clients, 1)
