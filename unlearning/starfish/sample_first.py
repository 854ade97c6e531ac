"""A check round's estimates formed only where SecTC compares them (docs/ALGORITHM.md §4,
"Sample-first check"; Algorithm 3 with Algorithm 4 lines 16–19).

With a public sample P of coordinates (`check_sample`), SecTC compares every client's
estimate on P first and on the other coordinates only for the clients P left unflagged
(`Backend.threshold_flags` with a sample does the same on full rows). Where nothing else
reads a client's row (no DP clipping), the estimates are formed only there:

* ĝ^j(P) = g_r^j(P) + H^j v (P) for every client (`secue.expand_terms` on the columns P: one
  Beaver product of the held rows' columns, n·k·|P| values, instead of an m-sized
  fixed-operand pair per client);
* whole rows ĝ^j only for the clients P did not flag (their other coordinates compared);
* a flagged client's row is replaced by its exact answer, so its m-sized estimate is never
  formed: the round's update is Σ_j c_j·ĝ^j over the clients keeping their estimate
  (`secue.sum_terms`, one m-sized product) plus Σ_j c_j·[g_exact^j] over the published answers.

The flags, and so every revealed bit (one flag and one sample-decided bit per client), are
those of the full rows; the update is the same sum.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from mpc.backend import Backend, Secret
from unlearning.fedavg import weighted_sum
from unlearning.starfish.secue import GroupTerms, expand_terms, sum_terms


def sample_first_flags(
    backend: Backend,
    terms: Sequence[GroupTerms],
    stored: Secret,
    v: torch.Tensor,
    deltas: Secret,
    sample: torch.Tensor,
) -> list[bool]:
    """SecTC's public flags (Algorithm 3) of the clients (rows of `stored`, thresholds
    `deltas`), sample first, on estimates formed where compared (module docstring): the
    sample's columns for every client, whole rows for the clients it left unflagged. UE
    work is counted in step "UE", the comparisons in "TC"."""
    cols = torch.unique(sample)  # sorted, as `Backend.threshold_flags` takes a sample
    rest = torch.ones(stored.shape[1], dtype=torch.bool)
    rest[cols] = False
    with backend.step("UE"):
        sampled = expand_terms(backend, terms, stored, v, cols=cols)
    with backend.step("TC"):
        flags = backend.threshold_flags(sampled, deltas).reshape(-1).clone()
    pending = torch.nonzero(~flags).flatten()
    if pending.numel() == 0 or not bool(rest.any()):
        return [bool(f) for f in flags.tolist()]
    with backend.step("UE"):
        rows = expand_terms(backend, terms, stored, v, positions=pending.tolist())
    with backend.step("TC"):
        others = backend.index(rows, (slice(None), torch.nonzero(rest).flatten()))
        flags[pending] = backend.threshold_flags(others, backend.index(deltas, pending)).reshape(-1)
    return [bool(f) for f in flags.tolist()]


def kept_update(
    backend: Backend,
    terms: Sequence[GroupTerms],
    stored: Secret,
    v: torch.Tensor,
    clients: Sequence[str],
    coefficients: Sequence[float],
    published: Mapping[str, Secret],
) -> Secret:
    """[U] = Σ_j c_j·ĝ^j over the clients without a published answer + Σ_j c_j·[g_exact^j]
    over those with one (Algorithm 4 line 19 with the corrected rows), shape (m,)."""
    weights = [0.0 if c in published else float(w) for c, w in zip(clients, coefficients, strict=True)]
    update = sum_terms(backend, terms, stored, v, weights)
    answered = [(c, w) for c, w in zip(clients, coefficients, strict=True) if c in published]
    if not answered:
        return update
    m = stored.shape[1]
    exact = backend.stack([backend.reshape(published[c], (m,)) for c, _ in answered], dim=0)
    return backend.add(update, weighted_sum(backend, exact, [float(w) for _, w in answered]))
