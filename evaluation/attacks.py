"""Attacks used to verify unlearning (Starfish §VI-A).

Backdoor (BA). The target client poisons its own training set: it keeps its clean
samples and adds `copies` copies of them with a trigger (a bright square patch in the
bottom-right corner) relabelled to `target_label`. In a prototype on 5k MNIST one
triggered copy gave only ≈56 % backdoor success; two gave 92–96 % (measured here: 89 %
at η_l = 0.05 and 96 % at η_l = 0.1), so two is the default.
BA-ASR is measured on the target's clean images with the trigger applied, leaving out
images whose true label already is the target label.

Membership inference (MIA): the loss-threshold attack of Yeom et al. (CSF 2018). The
attacker knows the model and a set of its training members (the remaining clients'
data); it sets τ to their mean cross-entropy loss and declares a sample a member when its
loss is ≤ τ. MIA-ASR is the fraction of the target's training samples (clean plus one
triggered copy, as trained on) declared members. The same rule applied to the test set
gives the attack's false-positive rate, reported beside it for context.

The confidence attack of Song and Mittal (USENIX Security 2021), the PUF paper's
MIA[Song]: the attacker learns, per class c, the threshold τ_c on the model's confidence
in the true label that best separates known members (the remaining clients' data) from
known non-members (the test set), i.e. maximises (TPR + TNR)/2 on that balanced task,
and declares a sample of class c a member when its confidence is ≥ τ_c. The confidence
is e^{−loss}, so we threshold the loss (member when loss ≤ τ_c).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TriggerSpec:
    """A square patch of value `value` and side `size` at offset `margin` from the
    bottom-right corner, relabelled to `target_label`."""

    target_label: int = 0
    size: int = 4
    margin: int = 1
    value: float = 1.0

    @classmethod
    def for_shape(cls, height: int, target_label: int = 0) -> TriggerSpec:
        """Default patch for an image side: 4×4 on 28×28, 2×2 on 8×8."""
        size = max(2, height // 7)
        return cls(target_label=target_label, size=size, margin=1 if height >= 16 else 0)


def apply_trigger(x: np.ndarray, spec: TriggerSpec) -> np.ndarray:
    """A copy of images `x` (N, C, H, W) with the patch stamped on every channel."""
    x = np.array(x, dtype=np.float32, copy=True)
    h, w = x.shape[-2:]
    if spec.size + spec.margin > min(h, w):
        raise ValueError(f"trigger of size {spec.size} (margin {spec.margin}) does not fit {h}×{w} images")
    r1, c1 = h - spec.margin, w - spec.margin
    x[..., r1 - spec.size : r1, c1 - spec.size : c1] = spec.value
    return x


def backdoor_data(x: np.ndarray, y: np.ndarray, spec: TriggerSpec, copies: int) -> tuple[np.ndarray, np.ndarray]:
    """The poisoned local set: clean samples followed by `copies` triggered, relabelled copies."""
    if copies < 0:
        raise ValueError(f"copies must be ≥ 0; got {copies}")
    triggered = apply_trigger(x, spec)
    xs = [np.asarray(x, dtype=np.float32)] + [triggered] * copies
    ys = [np.asarray(y, dtype=np.int64)] + [np.full(len(y), spec.target_label, dtype=np.int64)] * copies
    return np.concatenate(xs), np.concatenate(ys)


def backdoor_eval_set(x: np.ndarray, y: np.ndarray, spec: TriggerSpec) -> np.ndarray:
    """Triggered images of the target's clean samples whose label is not the target label."""
    keep = np.asarray(y) != spec.target_label
    return apply_trigger(np.asarray(x)[keep], spec)


def loss_threshold(member_losses: np.ndarray) -> float:
    """Yeom et al.'s τ: the mean loss on known members."""
    losses = np.asarray(member_losses, dtype=np.float64)
    if losses.size == 0:
        raise ValueError("need at least one member loss to set the threshold")
    return float(losses.mean())


def membership_predictions(losses: np.ndarray, tau: float) -> np.ndarray:
    """Boolean 'is a member' per sample: loss ≤ τ."""
    return np.asarray(losses, dtype=np.float64) <= tau


def best_threshold(member_losses: np.ndarray, outside_losses: np.ndarray) -> float:
    """The τ maximising (P[member loss ≤ τ] + P[outside loss > τ])/2 (ties: the smallest τ)."""
    inside = np.sort(np.asarray(member_losses, dtype=np.float64))
    outside = np.sort(np.asarray(outside_losses, dtype=np.float64))
    if inside.size == 0 or outside.size == 0:
        raise ValueError("need member and outside losses to learn a threshold")
    candidates = np.concatenate([inside, outside])
    tpr = np.searchsorted(inside, candidates, side="right") / inside.size
    tnr = 1.0 - np.searchsorted(outside, candidates, side="right") / outside.size
    score = tpr + tnr
    best = np.flatnonzero(score == score.max())
    return float(candidates[best].min())


def class_thresholds(
    member_losses: np.ndarray,
    member_labels: np.ndarray,
    outside_losses: np.ndarray,
    outside_labels: np.ndarray,
    num_classes: int,
) -> np.ndarray:
    """Song and Mittal's per-class thresholds τ_c; a class missing from either set gets the
    threshold learned on all classes together."""
    pooled = best_threshold(member_losses, outside_losses)
    out = np.full(num_classes, pooled)
    for c in range(num_classes):
        inside, outside = member_losses[member_labels == c], outside_losses[outside_labels == c]
        if inside.size and outside.size:
            out[c] = best_threshold(inside, outside)
    return out


def class_threshold_predictions(losses: np.ndarray, labels: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """Boolean 'is a member' per sample: loss ≤ τ of its class."""
    return np.asarray(losses, dtype=np.float64) <= np.asarray(thresholds)[np.asarray(labels)]
