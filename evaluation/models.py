"""The paper's models (FedRecover's CNNs, Starfish §VI-A) and a tiny model for tests,
plus conversion between a module and the public flat float32 vector.

| name          | layers                                                        | params  |
| ------------- | ------------------------------------------------------------- | ------- |
| ``mnist_cnn`` | conv 1→32 5×5, pool 2, conv 32→64 5×5, pool 2, FC 1024→512, FC 512→10 | 582,026 |
| ``fmnist_cnn``| as mnist_cnn with one more FC 512→512 before the output       | 844,682 |
| ``cifar_cnn`` | conv 3→32 5×5, pool 2, conv 32→64 5×5, pool 2, FC 1600→512, FC 512→10 | 878,538 |
| ``digits_mlp``| FC 64→32, FC 32→10 (8×8 digits; fast tests)                   | 2,410   |
| ``mnist_mlp`` | FC 784→64, FC 64→10 (28×28; multi-seed quality sweeps)        | 50,890  |

Convolutions are unpadded and followed by ReLU and 2×2 max-pooling; hidden FC layers use
ReLU. "CIFAR-10 width 1600" is the flattened conv output 64·5·5 feeding the first FC
layer (1024 = 64·4·4 for 28×28 inputs). The extra F-MNIST layer's width (512) is our
choice; the paper only says "an extra fully connected layer".

The flat vector is `torch.nn.utils.parameters_to_vector(module.parameters())`: the
parameters in registration order, each row-major. No model has buffers.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


def _cnn(in_channels: int, flat: int, hidden: tuple[int, ...]) -> nn.Sequential:
    layers: list[nn.Module] = [
        nn.Conv2d(in_channels, 32, 5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
    ]
    width = flat
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    layers.append(nn.Linear(width, 10))
    return nn.Sequential(*layers)


def _digits_mlp() -> nn.Sequential:
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))


#: architecture name → (builder, input shape (C, H, W))
ARCHITECTURES: dict[str, tuple[Callable[[], nn.Module], tuple[int, int, int]]] = {
    "mnist_cnn": (lambda: _cnn(1, 1024, (512,)), (1, 28, 28)),
    "fmnist_cnn": (lambda: _cnn(1, 1024, (512, 512)), (1, 28, 28)),
    "cifar_cnn": (lambda: _cnn(3, 1600, (512,)), (3, 32, 32)),
    "digits_mlp": (_digits_mlp, (1, 8, 8)),
    "mnist_mlp": (lambda: nn.Sequential(nn.Flatten(), nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10)), (1, 28, 28)),
}

#: default architecture per dataset
DEFAULT_ARCHITECTURE = {"mnist": "mnist_cnn", "mnist5k": "mnist_cnn", "digits": "digits_mlp"}


def build_model(architecture: str, seed: int | None = None) -> nn.Module:
    """A fresh module; with `seed`, PyTorch's default initialisation under that seed."""
    try:
        builder, _ = ARCHITECTURES[architecture]
    except KeyError:
        raise ValueError(f"unknown architecture {architecture!r}; choose one of {', '.join(ARCHITECTURES)}") from None
    if seed is None:
        return builder()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return builder()


def input_shape(architecture: str) -> tuple[int, int, int]:
    """(C, H, W) the architecture expects."""
    if architecture not in ARCHITECTURES:
        raise ValueError(f"unknown architecture {architecture!r}")
    return ARCHITECTURES[architecture][1]


def num_parameters(module: nn.Module) -> int:
    """Length m of the flat vector."""
    return sum(p.numel() for p in module.parameters())


def get_flat(module: nn.Module) -> torch.Tensor:
    """The public flat float32 vector of `module` (a copy)."""
    return nn.utils.parameters_to_vector(module.parameters()).detach().to(torch.float32).clone()


def set_flat(module: nn.Module, vector: torch.Tensor) -> None:
    """Load a flat vector into `module` in place; refuses a vector of the wrong length."""
    m = num_parameters(module)
    vec = torch.as_tensor(vector)
    if vec.ndim != 1 or vec.numel() != m:
        raise ValueError(f"model vector has shape {tuple(vec.shape)}; the architecture needs ({m},)")
    # copy (vector_to_parameters would make the parameters views of `vector`)
    with torch.no_grad():
        offset = 0
        for p in module.parameters():
            p.copy_(vec[offset : offset + p.numel()].view_as(p))
            offset += p.numel()


def initial_model(architecture: str, seed: int) -> torch.Tensor:
    """M_0: the seeded default initialisation as a flat vector."""
    return get_flat(build_model(architecture, seed))
