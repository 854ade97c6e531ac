"""The settings of a simulated Stage I run (`evaluation.simulator`), readable without torch.

The command line reads the defaults of `SimulationConfig` to build its parser; the models
(and torch) are loaded only when a configuration is resolved or validated.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class SimulationConfig:
    """Every setting of a simulated Stage I run (JSON-serialisable)."""

    dataset: str = "mnist5k"
    architecture: str = ""  #: empty: the dataset's default (evaluation.models.DEFAULT_ARCHITECTURE)
    num_clients: int = 20
    rounds: int = 40
    lr: float = 0.05
    local_epochs: int = 2
    batch_size: int = 64
    partition: str = "iid"
    dirichlet_beta: float = 0.5
    tolerance_rate: float = 0.4  #: α
    num_targets: int = 1  #: clients 0..num_targets−1 are the targets
    backdoor_copies: int = 2  #: triggered copies added to each target's data; 0 disables the backdoor
    target_label: int = 0
    max_train_samples: int = 0  #: > 0: use only the first that many (shuffled) training samples
    seed: int = 0
    #: clients privatize their uploads with FedADP's adaptive Gaussian mechanism (evaluation.upload_dp)
    upload_dp: bool = False
    dp_clip_norm: float = 1.0  #: S
    dp_delta: float = 1e-5  #: δ
    dp_epsilon_0: float = 1.0  #: ε_0
    dp_epsilon_min: float = 1.0  #: ε_min
    dp_epsilon_max: float = 3.0  #: ε_max (FedADP's privacy budget)
    dp_noise_seed: int = 0  #: seed of the clients' noise

    def resolved(self) -> SimulationConfig:
        """The config with the default architecture filled in, after validation."""
        from evaluation.models import DEFAULT_ARCHITECTURE

        arch = self.architecture or DEFAULT_ARCHITECTURE.get(self.dataset, "")
        cfg = replace(self, architecture=arch)
        cfg.validate()
        return cfg

    def validate(self) -> None:
        from evaluation.models import DEFAULT_ARCHITECTURE

        if self.dataset not in DEFAULT_ARCHITECTURE:
            raise ValueError(f"unknown dataset {self.dataset!r}; choose one of {', '.join(DEFAULT_ARCHITECTURE)}")
        if self.num_clients < 2:
            raise ValueError("need at least two clients (one target and one that remains)")
        if not 0 <= self.num_targets < self.num_clients:
            raise ValueError(f"num_targets must lie in [0, {self.num_clients}); got {self.num_targets}")
        if self.rounds < 1:
            raise ValueError(f"rounds must be ≥ 1; got {self.rounds}")
        if not 0.0 < self.tolerance_rate <= 1.0:
            raise ValueError(f"tolerance rate must lie in (0, 1]; got {self.tolerance_rate}")
        if self.upload_dp:
            self._validate_dp()

    def _validate_dp(self) -> None:
        if not self.dp_clip_norm > 0:
            raise ValueError(f"DP clip norm S must be positive; got {self.dp_clip_norm}")
        if not 0 < self.dp_delta < 1:
            raise ValueError(f"DP δ must lie in (0, 1); got {self.dp_delta}")
        if not 0 < self.dp_epsilon_min <= self.dp_epsilon_0 <= self.dp_epsilon_max:
            raise ValueError(
                f"need 0 < ε_min ≤ ε_0 ≤ ε_max; got {self.dp_epsilon_min}, {self.dp_epsilon_0}, {self.dp_epsilon_max}"
            )

    def client_id(self, j: int) -> str:
        return f"client-{j:02d}"
