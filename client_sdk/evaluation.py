"""A remaining client's answer to an evaluation task (docs/SERVICE.md, "Client SDK":
"Federated evaluation"; docs/JOBS.md §7).

After a job succeeded, each remaining client is asked to score the unlearned model M̂ and
the model it replaced, M_T, on its own held-out data with a callback it registers
(`Client.serve_tasks(..., eval_fn=...)`): `eval_fn(new_params, old_params, task) → EvalCounts`.
The counts are encoded with their bit decompositions (mpc.eval_counts), split into two
additive shares over Z_2^64 with a mask from the OS CSPRNG, and each party receives one
share: neither party, nor anyone else, sees this client's counts — only the sums over at
least the minimum cohort of evaluators are ever opened.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from mpc.eval_counts import encode, share


@dataclass(frozen=True)
class EvalCounts:
    """What the callback returns: integer counts on this client's own held-out data.

    `correct_new` / `correct_old`: examples M̂ / M_T classify correctly, of `total`;
    `probe_new` / `probe_old`: probe examples on which M̂ / M_T give the probe's answer (the
    backdoor's target label, the forgotten class…), of `probe_total` (0 without a probe)."""

    correct_new: int
    correct_old: int
    total: int
    probe_new: int = 0
    probe_old: int = 0
    probe_total: int = 0

    def vector(self) -> np.ndarray:
        values = (self.correct_new, self.correct_old, self.total, self.probe_new, self.probe_old, self.probe_total)
        if any(int(v) != v for v in values):
            raise ValueError(f"evaluation counts must be integers, got {values}")
        return np.array([int(v) for v in values], dtype=np.int64)


def answer_shares(counts: EvalCounts, max_eval_samples: int) -> tuple[np.ndarray, np.ndarray]:
    """The two shares of the answer (party0's, party1's); ValueError naming the broken rule
    (a count above its total, a total above the operator's N) before anything is sent."""
    return share(encode(counts.vector(), max_eval_samples), os.urandom)


#: the callback: (M̂'s flat parameters, M_T's flat parameters, the task) → counts
EvalFn = Callable[[np.ndarray, np.ndarray, object], EvalCounts]
