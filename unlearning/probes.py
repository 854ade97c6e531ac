"""Optional evaluation interfaces some baseline strategies need beyond the oracle.

`GradientOracle` answers "your gradient at model M̂ for round t". A few seed methods
also look at what a model *predicts*:

* Crab (Algorithm 1, line 3; eq. (1)) ranks rounds by the KL divergence between the
  output distributions p(M_{i−1}) and p(M_i) on a data set, and cuts the training into
  time windows by the loss F(M_t) (Algorithm 2, line 12);
* FedADP (Algorithm 1, lines 18 and 25–26) cuts windows by the loss and drives its
  adaptive privacy budget ε_{t+1} = min(max(ε_t·e^{Δloss}, ε_min), ε_max) by the change
  of the training loss between rounds;
* PUF (§V-D) recovers until the unlearned model reaches the retrained model's test
  accuracy, which needs the accuracy of each recovered model.

`ModelProbe` provides exactly that: class probabilities, the mean loss and the accuracy
of a public model on a fixed probe set (a public validation set in the simulator; in a deployment,
data the server may legitimately evaluate on). It never sees client data or secrets;
its inputs are public models. The evaluation package implements it next to its
simulator and passes it as `UnlearnContext.probe`; strategies that need it raise
`UnlearningError` when it is absent (see `require_probe`; `Strategy.needs_probe`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from unlearning.errors import UnlearningError


class ModelProbe(ABC):
    """Model outputs and loss on a fixed, public probe data set."""

    @abstractmethod
    def probabilities(self, model: torch.Tensor) -> torch.Tensor:
        """Class probabilities p(M) of the flat public model `model` on every probe
        sample, shape (n_samples, n_classes); rows sum to 1."""

    @abstractmethod
    def loss(self, model: torch.Tensor) -> float:
        """Mean training-objective loss F(M) of `model` on the probe set."""

    @abstractmethod
    def accuracy(self, model: torch.Tensor) -> float:
        """Fraction of probe samples whose most probable class under `model` is their label."""


def require_probe(probe: object, strategy: str) -> ModelProbe:
    """`probe` (a context's), or a clear `UnlearningError` naming what is missing."""
    if probe is None:
        raise UnlearningError(
            f"strategy {strategy!r} needs a ModelProbe (model outputs and loss on a probe data set): "
            "pass one as UnlearnContext.probe"
        )
    if not isinstance(probe, ModelProbe):
        raise UnlearningError(f"UnlearnContext.probe must be a ModelProbe, got {type(probe).__name__}")
    return probe
