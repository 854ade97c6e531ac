"""`ModelProbe` for the simulator: outputs, mean loss and accuracy of a public model on a
fixed public probe set (Crab's KL-divergence round ranking and loss windows, FedADP's loss
trend, PUF's recovery-until-retrain stopping rule).

The probe set is the first `PROBE_SAMPLES` images of the dataset's test split, standing
in for a public validation set the server may evaluate on. It touches no client data.
Test error is still reported on the whole test split, so these images take part in both
(they only steer which rounds Crab/FedADP keep; they are never trained on).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from evaluation.datasets import Dataset
from evaluation.models import build_model, set_flat
from unlearning.probes import ModelProbe

PROBE_SAMPLES = 500


class DatasetProbe(ModelProbe):
    """Softmax outputs and cross-entropy of a flat model on a fixed probe set."""

    def __init__(self, architecture: str, dataset: Dataset, samples: int = PROBE_SAMPLES) -> None:
        if samples < 1:
            raise ValueError("the probe set needs at least one sample")
        self._module = build_model(architecture)
        self._x = torch.from_numpy(np.ascontiguousarray(dataset.test_x[:samples]))
        self._y = torch.from_numpy(np.ascontiguousarray(dataset.test_y[:samples]))

    @torch.no_grad()
    def _logits(self, model: torch.Tensor) -> torch.Tensor:
        set_flat(self._module, model)
        self._module.eval()
        return self._module(self._x).to(torch.float64)

    def probabilities(self, model: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self._logits(model), dim=1)

    def loss(self, model: torch.Tensor) -> float:
        return float(F.cross_entropy(self._logits(model), self._y))

    def accuracy(self, model: torch.Tensor) -> float:
        return float((self._logits(model).argmax(dim=1) == self._y).to(torch.float64).mean())
