"""Unlearning metrics (Starfish §VI-A) on public models.

* TER: fraction of test inputs the model misclassifies.
* BA-ASR: fraction of the targets' triggered images (true label ≠ target label)
  classified as the target label (`attacks.backdoor_eval_set`).
* MIA-ASR: fraction of the targets' training samples the loss-threshold attack
  declares members (`attacks.loss_threshold`); `mia_test_rate` is the same rule on
  the test set (the attack's false-positive rate). `mia_confidence` is the same
  fraction under Song and Mittal's per-class confidence attack (`attacks.class_thresholds`).
* Forget accuracy (PUF §V-C): accuracy of the model on the targets' own clean training
  data (natural images with their true labels).
* ARP: (1/|C_r|) Σ_j (T − T_r^j)/T × 100 %, T_r^j the number of unlearning rounds in
  which remaining client j had to compute a gradient, T the stored rounds (what
  retraining would cost every client).
* Gap: ‖M̂ − M_retrain‖₂ and its relative value ‖M̂ − M_retrain‖₂ / ‖M_retrain‖₂.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import torch
import torch.nn.functional as F

from evaluation.attacks import (
    backdoor_data,
    backdoor_eval_set,
    class_threshold_predictions,
    class_thresholds,
    loss_threshold,
    membership_predictions,
)
from evaluation.models import build_model, set_flat
from evaluation.simulator import SimulationResult

#: evaluation batch size (memory bound only)
EVAL_BATCH = 1000
#: at most this many known-member samples set the MIA threshold
MIA_MEMBER_SAMPLES = 5000


@torch.no_grad()
def per_sample_losses(
    architecture: str, model: torch.Tensor, x: np.ndarray, y: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(cross-entropy loss, predicted label) per sample."""
    module = build_model(architecture)
    set_flat(module, model)
    module.eval()
    losses, preds = [], []
    for b in range(0, len(y), EVAL_BATCH):
        xb = torch.from_numpy(np.ascontiguousarray(x[b : b + EVAL_BATCH]))
        yb = torch.from_numpy(np.ascontiguousarray(y[b : b + EVAL_BATCH]))
        logits = module(xb)
        losses.append(F.cross_entropy(logits, yb, reduction="none").numpy())
        preds.append(logits.argmax(1).numpy())
    if not losses:
        return np.zeros(0), np.zeros(0, dtype=np.int64)
    return np.concatenate(losses), np.concatenate(preds)


def error_rate(pred: np.ndarray, y: np.ndarray) -> float:
    """Fraction of `pred` different from `y`."""
    if len(y) == 0:
        raise ValueError("empty evaluation set")
    return float(np.mean(np.asarray(pred) != np.asarray(y)))


def attack_success_rate(pred: np.ndarray, target_label: int) -> float:
    """Fraction of predictions equal to the attacker's label."""
    if len(pred) == 0:
        raise ValueError("empty backdoor evaluation set")
    return float(np.mean(np.asarray(pred) == target_label))


def average_round_saving(participation: Mapping[str, int], clients: Iterable[str], total_rounds: int) -> float:
    """ARP in percent; clients absent from `participation` were never asked (T_r = 0)."""
    ids = list(clients)
    if not ids or total_rounds < 1:
        raise ValueError("ARP needs at least one client and one stored round")
    return float(np.mean([(total_rounds - participation.get(c, 0)) / total_rounds for c in ids]) * 100.0)


def model_gap(model: torch.Tensor, reference: torch.Tensor) -> dict[str, float]:
    """‖M̂ − M_ref‖₂ and the same relative to ‖M_ref‖₂."""
    a, b = model.to(torch.float64), reference.to(torch.float64)
    gap = float(torch.linalg.vector_norm(a - b))
    return {"l2": gap, "relative": gap / max(float(torch.linalg.vector_norm(b)), 1e-300)}


class Evaluator:
    """TER, BA-ASR and MIA-ASR of any model of a simulation."""

    def __init__(self, result: SimulationResult) -> None:
        fed = result.federation
        self.architecture = fed.config.architecture
        self.trigger = fed.trigger
        ds = fed.dataset
        self.num_classes = ds.num_classes
        self.test = (ds.test_x, ds.test_y)
        clean = list(fed.clean_target_data.values())
        self.has_targets = bool(clean)
        if clean:
            cx = np.concatenate([c[0] for c in clean])
            cy = np.concatenate([c[1] for c in clean])
            self.backdoor_x = backdoor_eval_set(cx, cy, self.trigger)
            self.clean_target = (cx, cy)
            # the targets' samples as trained on: clean ones and one copy of the triggered ones
            self.target_x, self.target_y = cx, cy
            if fed.config.backdoor_copies > 0:
                self.target_x, self.target_y = backdoor_data(cx, cy, self.trigger, copies=1)
        members = fed.remaining()
        mx = np.concatenate([c.x.numpy() for c in members])
        my = np.concatenate([c.y.numpy() for c in members])
        pick = np.random.default_rng(fed.config.seed).permutation(len(my))[:MIA_MEMBER_SAMPLES]
        self.member = (mx[pick], my[pick])

    def evaluate(self, model: torch.Tensor) -> dict[str, float]:
        """Metrics of `model` (rates in [0, 1])."""
        test_loss, test_pred = per_sample_losses(self.architecture, model, *self.test)
        out = {"ter": error_rate(test_pred, self.test[1]), "test_loss": float(test_loss.mean())}
        if self.has_targets:
            _, bd_pred = per_sample_losses(
                self.architecture, model, self.backdoor_x, np.full(len(self.backdoor_x), self.trigger.target_label)
            )
            out["ba_asr"] = attack_success_rate(bd_pred, self.trigger.target_label)
            member_loss, _ = per_sample_losses(self.architecture, model, *self.member)
            tau = loss_threshold(member_loss)
            target_loss, _ = per_sample_losses(self.architecture, model, self.target_x, self.target_y)
            out["mia_asr"] = float(membership_predictions(target_loss, tau).mean())
            out["mia_test_rate"] = float(membership_predictions(test_loss, tau).mean())
            out["mia_threshold"] = tau
            taus = class_thresholds(member_loss, self.member[1], test_loss, self.test[1], self.num_classes)
            out["mia_confidence"] = float(class_threshold_predictions(target_loss, self.target_y, taus).mean())
            _, clean_pred = per_sample_losses(self.architecture, model, *self.clean_target)
            out["forget_accuracy"] = 1.0 - error_rate(clean_pred, self.clean_target[1])
        return out
