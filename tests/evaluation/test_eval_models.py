"""Paper architectures and flat-vector helpers."""

from __future__ import annotations

import pytest
import torch

from evaluation.models import ARCHITECTURES, build_model, get_flat, initial_model, input_shape, num_parameters, set_flat


def test_mnist_cnn_has_the_papers_582026_parameters() -> None:
    model = build_model("mnist_cnn")
    assert num_parameters(model) == 582_026
    assert get_flat(model).shape == (582_026,)


@pytest.mark.parametrize("arch, count", [("fmnist_cnn", 844_682), ("cifar_cnn", 878_538), ("digits_mlp", 2_410)])
def test_other_architectures_sizes_and_shapes(arch: str, count: int) -> None:
    model = build_model(arch)
    assert num_parameters(model) == count
    assert model(torch.zeros(3, *input_shape(arch))).shape == (3, 10)


def test_cifar_cnn_feeds_1600_features_to_its_first_fc_layer() -> None:
    linear = [m for m in build_model("cifar_cnn").modules() if isinstance(m, torch.nn.Linear)]
    assert linear[0].in_features == 1600 and linear[0].out_features == 512


def test_flat_vector_roundtrip_and_copy_semantics() -> None:
    model = build_model("digits_mlp", seed=1)
    vec = torch.randn(num_parameters(model))
    set_flat(model, vec)
    assert torch.equal(get_flat(model), vec)
    vec.add_(1.0)  # the module must hold a copy, not a view of the caller's vector
    assert not torch.equal(get_flat(model), vec)
    flat = get_flat(model)
    with torch.no_grad():
        next(model.parameters()).add_(1.0)
    assert not torch.equal(get_flat(model), flat)


def test_set_flat_rejects_wrong_length_and_unknown_architecture() -> None:
    with pytest.raises(ValueError, match=r"needs \(2410,\)"):
        set_flat(build_model("digits_mlp"), torch.zeros(10))
    with pytest.raises(ValueError, match="unknown architecture"):
        build_model("resnet")


def test_initial_model_is_reproducible_per_seed() -> None:
    assert torch.equal(initial_model("digits_mlp", 4), initial_model("digits_mlp", 4))
    assert not torch.equal(initial_model("digits_mlp", 4), initial_model("digits_mlp", 5))


def test_every_architecture_is_listed_with_its_input_shape() -> None:
    assert set(ARCHITECTURES) == {"mnist_cnn", "fmnist_cnn", "cifar_cnn", "digits_mlp", "mnist_mlp"}
