"""The torch helper: grad_fn returns the mean loss gradient / the pseudo-gradient of local SGD."""

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from client_sdk.evaluation import answer_shares
from client_sdk.torch_helper import flatten, load_flat, make_eval_counts_fn, make_evaluate_fn, make_grad_fn


def _setup(batch: int):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 3))
    x, y = torch.randn(20, 5), torch.randint(0, 3, (20,))
    return model, DataLoader(TensorDataset(x, y), batch_size=batch), x, y


def test_mean_gradient_matches_full_batch_autograd():
    model, loader, x, y = _setup(batch=6)
    params = flatten(model)
    grad, n = make_grad_fn(model, loader)(params)
    ref = nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 3))
    load_flat(ref, params)
    nn.functional.cross_entropy(ref(x), y).backward()
    expected = torch.cat([p.grad.reshape(-1) for p in ref.parameters()]).numpy()
    assert n == 20 and grad.dtype == np.float32
    assert np.allclose(grad, expected, atol=1e-6)


def test_one_local_step_pseudo_gradient_is_the_batch_gradient():
    model, loader, _, _ = _setup(batch=20)
    params = flatten(model)
    mean, _ = make_grad_fn(model, loader)(params)
    pseudo, n = make_grad_fn(model, loader, local_steps=1, local_lr=0.01)(params)
    assert n == 20
    assert np.allclose(pseudo, mean, atol=1e-4)


def test_evaluate_fn_gives_accuracy_and_mean_loss_of_the_given_parameters():
    model, loader, x, y = _setup(batch=7)
    params = flatten(model)
    ref = nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 3))
    load_flat(ref, params)
    with torch.no_grad():
        out = ref(x)
    scores = make_evaluate_fn(model, loader)(params)
    assert scores["accuracy"] == float((out.argmax(dim=1) == y).float().mean())
    assert np.isclose(scores["loss"], float(nn.functional.cross_entropy(out, y)), atol=1e-6)
    other = make_evaluate_fn(model, loader)(np.zeros_like(params))  # all logits 0: loss ln 3
    assert np.isclose(other["loss"], np.log(3.0), atol=1e-6)


def test_eval_counts_fn_counts_correct_and_probe_hits_of_both_models():
    model, loader, x, y = _setup(batch=7)
    new = flatten(model)
    torch.manual_seed(1)
    other = nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 3))
    old = flatten(other)
    probe = DataLoader(TensorDataset(x[:8], y[:8]), batch_size=3)
    counts = make_eval_counts_fn(model, loader, probe, probe_label=2)(new, old)
    with torch.no_grad():
        load_flat(model, new)
        pred_new = model(x).argmax(dim=1)
        pred_old = other(x).argmax(dim=1)
    assert (counts.correct_new, counts.correct_old, counts.total) == (
        int((pred_new == y).sum()),
        int((pred_old == y).sum()),
        20,
    )
    assert (counts.probe_new, counts.probe_old, counts.probe_total) == (
        int((pred_new[:8] == 2).sum()),
        int((pred_old[:8] == 2).sum()),
        8,
    )
    answer_shares(counts, 20)  # well-formed for an operator bound of 20
