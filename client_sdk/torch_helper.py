"""Torch helpers (optional; import only where torch is installed).

`make_grad_fn(model, loader)` returns `grad_fn(params) -> (gradient, n_samples)`: it loads
the flat public parameters into `model`, and returns the sample-weighted mean gradient of
the loss over one pass of `loader` (flat float32) and the number of samples. With
`local_steps > 0` it instead runs that many SGD steps at rate `local_lr` and returns the
pseudo-gradient (M_{i−1} − M_local)/η_l (docs/SERVICE.md, "What a client uploads"). The same function answers tasks
(its optional second argument, the task, is ignored).

`make_evaluate_fn(model, loader)` returns `evaluate(params) -> {"accuracy", "loss"}` (the
fraction of samples whose arg-max class is the label, and the mean loss) for the
forgotten client's self-check (`client_sdk.self_check`).

`make_eval_counts_fn(model, loader, probe_loader=None, probe_label=None)` returns the
evaluation callback of `Client.serve_tasks(..., eval_fn=...)` (client_sdk.evaluation): the
examples of `loader` each model classifies correctly, and on `probe_loader` the examples
each model answers with `probe_label` (a backdoor's target label) or, without one, with the
example's own label (the forgotten class).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import torch
from torch import nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from client_sdk.evaluation import EvalCounts, EvalFn


def flatten(model: nn.Module) -> np.ndarray:
    """The model's parameters as one flat float32 vector (the public model format)."""
    return parameters_to_vector(model.parameters()).detach().cpu().numpy().astype(np.float32)


def load_flat(model: nn.Module, params: np.ndarray) -> None:
    expected = sum(p.numel() for p in model.parameters())
    if params.size != expected:
        raise ValueError(f"model has {expected} parameters, the flat vector {params.size}")
    # a copy: the parameters must not alias the caller's array (local SGD would modify it)
    vector_to_parameters(torch.tensor(np.asarray(params, dtype=np.float32)), model.parameters())


def make_grad_fn(
    model: nn.Module, loader, loss_fn: Callable | None = None, local_steps: int = 0, local_lr: float = 0.01
) -> Callable[..., tuple[np.ndarray, int]]:
    loss_fn = loss_fn or nn.functional.cross_entropy

    def mean_gradient(params: np.ndarray, task=None) -> tuple[np.ndarray, int]:
        load_flat(model, params)
        model.train()
        model.zero_grad()
        total = 0
        for x, y in loader:
            loss = loss_fn(model(x), y, reduction="sum")
            loss.backward()
            total += int(y.shape[0])
        if total == 0:
            raise ValueError("the data loader yielded no samples")
        grad = (
            torch.cat(
                [p.grad.reshape(-1) if p.grad is not None else torch.zeros(p.numel()) for p in model.parameters()]
            )
            / total
        )
        return grad.detach().numpy().astype(np.float32), total

    def pseudo_gradient(params: np.ndarray, task=None) -> tuple[np.ndarray, int]:
        load_flat(model, params)
        model.train()
        opt = torch.optim.SGD(model.parameters(), lr=local_lr)
        steps = 0
        while steps < local_steps:
            for x, y in loader:
                opt.zero_grad()
                loss_fn(model(x), y).backward()
                opt.step()
                steps += 1
                if steps >= local_steps:
                    break
        local = flatten(model)
        return ((params.astype(np.float64) - local) / local_lr).astype(np.float32), len(loader.dataset)

    return pseudo_gradient if local_steps > 0 else mean_gradient


def make_evaluate_fn(model: nn.Module, loader, loss_fn: Callable | None = None) -> Callable[[np.ndarray], dict]:
    loss_fn = loss_fn or nn.functional.cross_entropy

    def evaluate(params: np.ndarray) -> dict[str, float]:
        load_flat(model, params)
        model.eval()
        correct, total, loss = 0, 0, 0.0
        with torch.no_grad():
            for x, y in loader:
                out = model(x)
                loss += float(loss_fn(out, y, reduction="sum"))
                correct += int((out.argmax(dim=1) == y).sum())
                total += int(y.shape[0])
        if total == 0:
            raise ValueError("the data loader yielded no samples")
        return {"accuracy": correct / total, "loss": loss / total}

    return evaluate


def _hits(model: nn.Module, params: np.ndarray, loader: Iterable, label: int | None) -> tuple[int, int]:
    """(examples the model answers with `label`, or their own label when None; examples)."""
    load_flat(model, params)
    model.eval()
    hits, total = 0, 0
    with torch.no_grad():
        for x, y in loader:
            predicted = model(x).argmax(dim=1)
            hits += int((predicted == (y if label is None else torch.full_like(y, label))).sum())
            total += int(y.shape[0])
    return hits, total


def make_eval_counts_fn(model: nn.Module, loader, probe_loader=None, probe_label: int | None = None) -> EvalFn:
    def eval_fn(new: np.ndarray, old: np.ndarray, task=None) -> EvalCounts:
        (right_new, total), (right_old, _) = _hits(model, new, loader, None), _hits(model, old, loader, None)
        if probe_loader is None:
            return EvalCounts(right_new, right_old, total)
        (probe_new, probe_total), (probe_old, _) = (
            _hits(model, new, probe_loader, probe_label),
            _hits(model, old, probe_loader, probe_label),
        )
        return EvalCounts(right_new, right_old, total, probe_new, probe_old, probe_total)

    return eval_fn
