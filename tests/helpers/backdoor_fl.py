"""A small synthetic federation with a backdoored client, for forgetting and utility tests.

Logistic regression (`synthetic_fl.LogRegFL`) on d clean features plus one trigger
feature. Benign clients never set the trigger; the target client "c0" sets it to
`TRIGGER` on half of its samples and labels those 1 (the backdoor), the rest of its data
is clean. Metrics on held-out data:

* TER — test error rate on clean samples;
* BA-ASR — fraction of triggered samples of true class 0 that the model labels 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from helpers.synthetic_fl import LogRegFL

TRIGGER = 3.0
TARGET = "c0"


@dataclass
class BackdoorFL:
    """The federation and its held-out clean and triggered test sets."""

    problem: LogRegFL
    test_x: torch.Tensor
    test_y: torch.Tensor
    attack_x: torch.Tensor  #: triggered samples of true class 0

    @classmethod
    def make(cls, n_clients: int = 5, dim: int = 5, seed: int = 0) -> BackdoorFL:
        gen = torch.Generator().manual_seed(seed)
        w_true = torch.randn(dim, generator=gen, dtype=torch.float64)

        def clean(n: int) -> tuple[torch.Tensor, torch.Tensor]:
            x = torch.randn(n, dim, generator=gen, dtype=torch.float64)
            y = ((x @ w_true + 0.3 * torch.randn(n, generator=gen, dtype=torch.float64)) > 0).to(torch.float64)
            return torch.cat([x, torch.zeros(n, 1, dtype=torch.float64)], dim=1), y

        data = {f"c{k}": clean(24 + 4 * k) for k in range(n_clients)}
        x0, y0 = clean(40)
        x0[:20, dim] = TRIGGER
        y0[:20] = 1.0
        data[TARGET] = (x0, y0)
        probe_x, probe_y = clean(64)
        test_x, test_y = clean(400)
        attack_x = test_x[test_y == 0].clone()
        attack_x[:, dim] = TRIGGER
        return cls(LogRegFL(data=data, probe_x=probe_x, probe_y=probe_y), test_x, test_y, attack_x)

    def ter(self, model: torch.Tensor) -> float:
        """Test error rate on clean held-out data."""
        predicted = (self.test_x @ model.to(torch.float64) > 0).to(torch.float64)
        return float((predicted != self.test_y).to(torch.float64).mean())

    def ba_asr(self, model: torch.Tensor) -> float:
        """Backdoor attack success rate: triggered class-0 samples labelled 1."""
        return float((self.attack_x @ model.to(torch.float64) > 0).to(torch.float64).mean())
