"""The FedModel contract for every registered model, and build_model's validation and seeding."""

from __future__ import annotations

import pytest
import torch

from fedbench.core.errors import ConfigError
from fedbench.core.registry import MODELS
from fedbench.models import FedModel, build_model, count_parameters

# name -> [(input_shape, options, width of fc_input)]; every registered model must appear here.
CASES = {
    "mlp": [((1, 28, 28), {}, 784), ((60,), {"hidden": [32, 16]}, 60), ((3, 8, 8), {"hidden": []}, 192)],
    "simple_nn": [((1, 28, 28), {}, 784)],
    "lenet5": [((1, 28, 28), {}, 400), ((3, 32, 32), {}, 576)],
    "cnn_mnist": [((1, 28, 28), {}, 3136)],
    "cnn_cifar": [((3, 32, 32), {}, 4096)],
    "resnet9": [((3, 32, 32), {}, 2048), ((1, 28, 28), {}, 2048)],
    "resnet18": [
        ((3, 32, 32), {}, 512),
        ((1, 28, 28), {}, 512),
        ((3, 32, 32), {"cifar_stem": True, "norm": "group"}, 512),
    ],
    "feddrm_net": [((1, 28, 28), {"backbone": "cnn"}, 1568), ((3, 32, 32), {}, 512)],
}
DENSITY_MODELS = {"made"}
"""Registered models that are not classifiers (tested in their own files)."""
FLAT_CASES = [(name, *case) for name, cases in CASES.items() for case in cases]
NUM_CLASSES = 7


def seeded_build(seed: int, name: str, shape: tuple[int, ...], **options) -> FedModel:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build_model(name, shape, NUM_CLASSES, **options)


def test_every_registered_model_is_covered():
    assert sorted([*CASES, *DENSITY_MODELS]) == MODELS.names()


@pytest.mark.parametrize("name, shape, options, fc_width", FLAT_CASES)
def test_contract(name, shape, options, fc_width):
    model = seeded_build(0, name, shape, **options).eval()
    assert isinstance(model, FedModel) and isinstance(model.head, torch.nn.Linear)
    assert model.cond_dim == 0
    x = torch.randn(2, *shape)
    with torch.no_grad():
        logits = model(x)
        rep = model.represent(x)
        assert logits.shape == (2, NUM_CLASSES)
        assert rep.shape == (2, model.head.in_features)
        assert torch.equal(logits, model.head(rep))
        assert model.fc_input(x).shape == (2, fc_width)


@pytest.mark.parametrize("name", ["lenet5", "cnn_mnist", "mlp", "simple_nn", "resnet9", "resnet18"])
def test_one_channel_28x28_inputs_work(name):
    model = seeded_build(0, name, (1, 28, 28)).eval()
    with torch.no_grad():
        assert model(torch.randn(2, 1, 28, 28)).shape == (2, NUM_CLASSES)


@pytest.mark.parametrize("name, shape, options, fc_width", [(name, *cases[0]) for name, cases in CASES.items()])
def test_same_seed_same_weights_other_seed_other_weights(name, shape, options, fc_width):
    a = seeded_build(1, name, shape, **options).state_dict()
    b = seeded_build(1, name, shape, **options).state_dict()
    c = seeded_build(2, name, shape, **options).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)


def test_build_model_does_not_seed_the_global_generator():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    with torch.random.fork_rng(devices=[]):
        build_model("lenet5", (1, 28, 28), 10)
    assert torch.initial_seed() == 123
    assert torch.equal(torch.rand(3), expected)
    torch.manual_seed(123)
    build_model("lenet5", (1, 28, 28), 10)  # outside fork_rng it draws from the caller's stream...
    assert torch.initial_seed() == 123  # ...without reseeding it
    assert not torch.equal(torch.rand(3), expected)


def test_count_parameters():
    model = build_model("mlp", (4,), 3, hidden=[5])
    assert count_parameters(model) == (4 * 5 + 5) + (5 * 3 + 3)


@pytest.mark.parametrize("name, shape", [("lenet5", (1, 28, 28)), ("cnn_mnist", (1, 28, 28)), ("mlp", (60,))])
def test_unconditioned_models_reject_cond(name, shape):
    model = build_model(name, shape, 10)
    x = torch.randn(2, *shape)
    for call in (model, model.represent, model.fc_input):
        with pytest.raises(ValueError, match="unconditioned"):
            call(x, torch.zeros(2, 32))


@pytest.mark.parametrize("name, shape", [("cnn_mnist", (1, 28, 28)), ("cnn_cifar", (3, 32, 32))])
def test_conditioning(name, shape):
    model = seeded_build(0, name, shape, cond_dim=32).eval()
    assert model.cond_dim == 32
    x = torch.randn(2, *shape)
    s1, s2 = torch.rand(2, 32), torch.rand(2, 32)
    with torch.no_grad():
        assert not torch.allclose(model(x, s1), model(x, s2))
        assert torch.equal(model.fc_input(x, s1), model.fc_input(x, s2))
        assert torch.equal(model(x, s1), model.head(model.represent(x, s1)))
    with pytest.raises(ValueError, match=r"pass cond of shape \[B, 32\]"):
        model(x)
    with pytest.raises(ValueError, match=r"cond must have shape \[2, 32\], got \[2, 8\]"):
        model(x, torch.rand(2, 8))


def test_unknown_model_name_lists_known_ones():
    with pytest.raises(ConfigError) as err:
        build_model("lenet7", (1, 28, 28), 10)
    assert err.value.field == "model.name"
    for name in MODELS.names():
        assert name in str(err.value)


@pytest.mark.parametrize(
    "name, options, field, allowed",
    [
        ("mlp", {"hiddn": [8]}, "model.hiddn", "cond_dim, hidden"),
        ("resnet18", {"nrom": "group"}, "model.nrom", "cifar_stem, norm"),
        ("lenet5", {"cond_dim": 32}, "model.cond_dim", "none"),
    ],
)
def test_unknown_option_lists_options(name, options, field, allowed):
    with pytest.raises(ConfigError) as err:
        build_model(name, (1, 28, 28), 10, **options)
    assert err.value.field == field
    assert err.value.allowed.endswith(f"are: {allowed}")


@pytest.mark.parametrize(
    "name, shape, options, field, allowed",
    [
        ("resnet18", (3, 32, 32), {"norm": "layer"}, "model.norm", "'batch', 'group'"),
        ("resnet18", (3, 32, 32), {"cifar_stem": "yes"}, "model.cifar_stem", "true or false"),
        ("cnn_mnist", (1, 28, 28), {"cond_dim": -1}, "model.cond_dim", ">= 0"),
        ("cnn_cifar", (3, 32, 32), {"cond_dim": 2.5}, "model.cond_dim", "an integer"),
        ("mlp", (60,), {"hidden": [8, 0]}, "model.hidden", "positive integers"),
    ],
)
def test_bad_option_value_says_what_is_allowed(name, shape, options, field, allowed):
    with pytest.raises(ConfigError) as err:
        build_model(name, shape, 10, **options)
    assert err.value.field == field
    assert allowed in err.value.allowed


@pytest.mark.parametrize(
    "name, shape, needs",
    [
        ("cnn_mnist", (3, 32, 32), "exactly (1, 28, 28)"),
        ("cnn_cifar", (1, 28, 28), "exactly (3, 32, 32)"),
        ("lenet5", (60,), "H, W >= 12"),
        ("lenet5", (1, 8, 8), "H, W >= 12"),
        ("resnet9", (3, 4, 4), "H, W >= 8"),
        ("resnet18", (60,), "images [C, H, W]"),
    ],
)
def test_unsupported_input_shape_is_a_config_error(name, shape, needs):
    with pytest.raises(ConfigError) as err:
        build_model(name, shape, 10)
    assert err.value.field == "model.name" and err.value.value == name
    assert str(shape) in str(err.value) and needs in str(err.value)


@pytest.mark.parametrize(
    "shape, classes, field",
    [((), 10, "input_shape"), ((1, 0, 28), 10, "input_shape"), ((1, 28, 28), 0, "num_classes")],
)
def test_bad_shape_or_class_count(shape, classes, field):
    with pytest.raises(ConfigError) as err:
        build_model("mlp", shape, classes)
    assert err.value.field == field


def test_parts_select_state_dict_entries_by_their_first_name():
    from fedbench.models.base import in_part, select_parts, without_parts

    weights = {
        "features.0.weight": 1,
        "body.0.weight": 2,
        "head.weight": 3,
        "head.bias": 4,
        "client_head.0.weight": 5,
        "header.weight": 6,
    }
    assert select_parts(weights, "head") == {"head.weight": 3, "head.bias": 4}  # not client_head, not header
    assert without_parts(weights, "head", "client_head") == {
        "features.0.weight": 1,
        "body.0.weight": 2,
        "header.weight": 6,
    }
    assert in_part("client_head.0.weight", "client_head") and not in_part("head.weight", "body")
