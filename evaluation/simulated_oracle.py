"""`GradientOracle` for the simulator: remaining clients recompute their gradients
locally, as the client SDK's correction-task handler does in the service.

A request "your exact gradient at M̂ for unlearning round t, replacing original round i"
(warm-up or correction, Starfish Algorithm 4; also retraining) is answered with the
pseudo-gradient of `LocalTrainer` started at M̂, with the client's data order of
original round i (`training.order_seed`). Asked at the stored model M_{i−1} for round i
it therefore reproduces the stored upload g_i^j. A request with `fresh_order` uses a
data order of its own (`training.fresh_order_seed`, keyed by i and t), and one with
`local_epochs` runs that many local epochs instead of the federation's.

Every request is logged, so client participation (ARP) is measured from what was
actually asked rather than from a strategy's own account. Target clients answer too
(on their own, poisoned data): methods such as PUF let the target unlearn itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

from evaluation.simulator import SimulationResult
from evaluation.training import fresh_order_seed, order_seed
from mpc.backend import Backend, Secret
from unlearning.history import GradientOracle, GradientRequest


@dataclass(frozen=True)
class OracleCall:
    """One answered request (public facts only)."""

    unlearning_round: int
    original_round: int
    reason: str
    clients: tuple[str, ...]
    unanswered: tuple[str, ...]


@dataclass
class SimulatedOracle(GradientOracle):
    """Answers gradient requests by local training on the simulated clients' data."""

    result: SimulationResult
    #: clients that never answer (simulates a missed deadline)
    unresponsive: frozenset[str] = frozenset()
    #: False on the party that is not the source of `backend.share`: its input is ignored
    #: by the sharing protocol, so it contributes zeros instead of training again
    compute: bool = True
    calls: list[OracleCall] = field(default_factory=list)

    def exact_gradient(self, model: torch.Tensor, client_id: str, original_round: int) -> torch.Tensor:
        """Plaintext pseudo-gradient of `client_id` at `model` with round `original_round`'s data order."""
        return self.answer(GradientRequest(model, 0, original_round, (client_id,), "exact"), client_id)

    def answer(self, request: GradientRequest, client_id: str) -> torch.Tensor:
        """Plaintext pseudo-gradient of `client_id` for `request` (data order and epochs as asked)."""
        fed = self.result.federation
        client = fed.client(client_id)
        if request.fresh_order:
            seed = fresh_order_seed(fed.config.seed, client.index, request.original_round, request.unlearning_round)
        else:
            seed = order_seed(fed.config.seed, client.index, request.original_round)
        return fed.trainer.pseudo_gradient(request.model, client, seed, request.local_epochs)

    def exact_gradients(self, backend: Backend, request: GradientRequest) -> Mapping[str, Secret | None]:
        out: dict[str, Secret | None] = {}
        for cid in request.clients:
            if cid in self.unresponsive:
                out[cid] = None
            elif self.compute:
                out[cid] = backend.share(self.answer(request, cid))
            else:
                out[cid] = backend.share(torch.zeros_like(request.model, dtype=torch.float32))
        self.calls.append(
            OracleCall(
                request.unlearning_round,
                request.original_round,
                request.reason,
                tuple(request.clients),
                tuple(c for c in request.clients if c in self.unresponsive),
            )
        )
        return out

    def participation(self) -> dict[str, int]:
        """T_r^j: the number of distinct unlearning rounds in which remaining client j answered."""
        rounds: dict[str, set[int]] = {}
        for call in self.calls:
            for cid in call.clients:
                if cid not in call.unanswered and cid not in self.result.targets:
                    rounds.setdefault(cid, set()).add(call.unlearning_round)
        return {cid: len(r) for cid, r in rounds.items()}
