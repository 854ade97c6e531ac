"""Noise on a Stage II reveal that holds steps taken at a Stage I model point (docs/PRIVACY.md,
"Anchored reveals").

Stage I published G_i = Σ_{j∈S_i} (n_j/N_i)·g_i^j at M_{i−1}. A Stage II step taken while the
public model sits at M_{i−1} (every run starts at M̂_1 = M_0) publishes, for each remaining
participant j, its gradient there or an estimate of it: exact answers, stored uploads and
L-BFGS estimates all approximate g_j(M_{i−1}), whatever data order the client used. With
ρ = η_u·max_j w_j/(n_j/N_i) the step's scale on G_i's weights, an observer forms
G_i − U/ρ ≈ ℓ_i = Σ_{j∈U} (n_j/N_i)·g_i^j over the clients U of S_i the step lacks — the
targets' round-i gradients. No rule on which steps to merge removes this: every step taken
at M_{i−1} adds the same vectors up to the estimates' error (7.3·10⁻⁴ measured).

So a reveal whose pending update holds such steps adds, in shares,

    z = κ·s·u/√m,   s = Σ_i Σ_{j∈U_i} c_ij·[‖g_i^j‖],   c_ij = Σ_steps ρ_step·n_j/N_i,

with u ~ N(0, I_m) secret (`Backend.keyed_random`: each party's half from its own keyed stream,
below) and
[‖g_i^j‖] the stored norms (checked against the shares by the upload check). By the triangle
inequality s ≥ ‖Σ_steps ρ_step·ℓ_i‖, so the observer's G_i − R/ρ misses ℓ_i by a Gaussian
vector of norm ≈ κ times ℓ_i's own (relative error ≈ κ). The scale s stays secret; the
revealed sum shows it only through its norm. This is not differential privacy (the DP
option is); it makes the anchored reveal no estimate of the targets' gradients.

**Keyed draws.** Each party draws a 32-byte noise key from the OS CSPRNG when the run starts
(`new_noise_key`); it is kept in the run's checkpointed state as this party's own secret part
(8 words below 2^32, loaded as a share: the other party never sees it). The reveal at step t
draws u under HMAC-SHA256(key, "anchor-reveal:" ‖ t) (`reveal_key`), so an opening repeated
after a crash (the same step, resumed from the same checkpoint) adds the very same noise, and
two reveals add independent noise.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import os
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch

from mpc.backend import Backend, Secret
from unlearning.history import SharedHistory
from unlearning.starfish.release import PendingRelease, near_anchor, stage1_coefficients

#: κ: the noise's norm over the largest norm of what an observer could isolate
KAPPA = 2.0
#: a step within this many Stage I steps of M_{i−1} is noised for round i (`note_anchor`)
ANCHOR_REACH = 2.0
KEY_WORDS = 8  #: a noise key as 8 words of 32 bits (exact in the plaintext backend's float64)

#: draws the secret u ~ N(0, I_m) of one reveal under this party's reveal key
#: (`Backend.keyed_random`; tests pass a fixed draw to compare backends)
NoiseDraw = Callable[[Backend, int, bytes], Secret]


def secret_gaussian(backend: Backend, m: int, key: bytes) -> Secret:
    """u ~ N(0, I_m), known to neither party, the same for the same reveal keys."""
    return backend.keyed_random((m,), key)


def new_noise_key(backend: Backend) -> Secret:
    """This party's noise key, from the OS CSPRNG, held as its own share (module doc)."""
    words = np.frombuffer(os.urandom(4 * KEY_WORDS), dtype="<u4").astype(np.int64)
    return backend.load_shares(words)


def reveal_key(backend: Backend, noise_key: Secret, step: int) -> bytes:
    """HMAC-SHA256(this party's key, "anchor-reveal:" ‖ t): the key of the reveal at step t."""
    words, _ = backend.export_shares(noise_key)
    key = np.asarray(words, dtype="<i8").tobytes()
    return hmac.new(key, b"anchor-reveal:%d" % step, hashlib.sha256).digest()


def step_terms(coefficients: Mapping[str, float], stage1: Mapping[str, float]) -> dict[str, float] | None:
    """c_j = ρ·n_j/N_i for the clients j of S_i the step lacks, with ρ = max_j η·w_j/(n_j/N_i)
    over the step's clients in S_i (`coefficients`: η·w_j; `stage1`: G_i's n_j/N_i); None when
    the step shares no client with S_i (nothing cancels)."""
    common = [c for c in coefficients if c in stage1]
    if not common:
        return None
    rho = max(coefficients[c] / stage1[c] for c in common)
    return {c: rho * share for c, share in stage1.items() if c not in coefficients}


def anchor_noise(
    backend: Backend,
    history: SharedHistory,
    anchors: Mapping[int, Mapping[str, float]],
    m: int,
    draw: Callable[[Backend, int], Secret],
) -> Secret | None:
    """[z] = κ·s·u/√m (module docstring) for the pending update's anchors
    {Stage I round i → {client → c_ij}}, u = draw(backend, m); None when there is nothing to hide."""
    scale: Secret | None = None
    for i, terms in sorted(anchors.items()):
        clients: Sequence[str] = sorted(c for c, v in terms.items() if v > 0)
        if not clients:
            continue
        coefficients = torch.tensor([terms[c] for c in clients], dtype=torch.float64)
        part = backend.dot(history.norms(backend, i, clients), coefficients)
        scale = part if scale is None else backend.add(scale, part)
    if scale is None:
        return None
    spread = backend.mul(backend.reshape(scale, (1,)), torch.full((m,), KAPPA / math.sqrt(m), dtype=torch.float64))
    return backend.mul(spread, draw(backend, m))


def note_anchor(
    history: SharedHistory,
    pending: PendingRelease,
    point: torch.Tensor,
    coefficients: Mapping[str, float],
    reach: float,
    tolerance: float,
) -> int | None:
    """A step taken at `point` within `reach` Stage I steps of some M_{i−1} (`release.near_anchor`):
    the clients of S_i it lacks join the pending anchors with c_ij (`step_terms`; `coefficients`:
    the step's η·w_j). Returns that i, or None when no M_{i−1} is within reach."""
    near = near_anchor(history, point, reach, tolerance)
    if near is None:
        return None
    terms = step_terms(coefficients, stage1_coefficients(history, near))
    if terms:
        pending.add_anchor(near, terms)
    return near


def noised(
    backend: Backend, history: SharedHistory, pending: PendingRelease, held: Secret, key: bytes, draw: NoiseDraw
) -> Secret:
    """[U] + [z]: the held sum plus the anchored noise of its anchors, u drawn under the reveal's `key`."""
    m = history.model(0).numel()
    noise = anchor_noise(backend, history, pending.anchors, m, lambda b, n: draw(b, n, key))
    return held if noise is None else backend.add(held, noise)


def anchored_rounds(pending: PendingRelease) -> list[int]:
    """The stored rounds whose anchors noised a reveal (for the run log's `noised_for`)."""
    return sorted(i for i, terms in pending.anchors.items() if any(v > 0 for v in terms.values()))
